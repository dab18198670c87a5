import florwb as flor


def summarize(outputs):
    metrics = {}
    flor.log("preset_metrics", len(metrics))
    metrics["loss"] = sum(o["loss"] for o in outputs) / len(outputs)
    metrics["acc"] = sum(o["correct"] for o in outputs) / sum(o["n"] for o in outputs)
    metrics["steps"] = len(outputs)
    return metrics
