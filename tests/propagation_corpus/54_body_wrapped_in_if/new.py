import florwb as flor


class Monitor:
    verbose = True

    def __init__(self, model):
        self.model = model
        self.history = []

    def on_epoch_end(self, epoch, loss):
        self.history.append(loss)
        norms = [p.grad.norm().item() for p in self.model.parameters() if p.grad is not None]
        grad_norm = sum(norms) / max(1, len(norms))
        flor.log("grad_norm", grad_norm)
        best = min(self.history)
        print(f"epoch {epoch} loss {loss:.4f} best {best:.4f} grad {grad_norm:.3f}")


monitor = Monitor(model)
for epoch in flor.loop("epoch", range(5)):
    monitor.on_epoch_end(epoch, train(model))
