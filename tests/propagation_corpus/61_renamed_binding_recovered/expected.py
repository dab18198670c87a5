import florwb as flor


def summarize(outputs):
    stats = {}
    flor.log("preset_metrics", len(stats))
    stats["loss"] = sum(o["loss"] for o in outputs) / len(outputs)
    stats["acc"] = sum(o["correct"] for o in outputs) / sum(o["n"] for o in outputs)
    stats["steps"] = len(outputs)
    return stats
