import florwb as flor

from lib import model, evaluate, test_loader

acc = evaluate(model, test_loader)
print(f"acc={acc:.2f}")
