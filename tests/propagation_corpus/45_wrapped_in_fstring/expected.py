import florwb as flor

from lib import model, evaluate, test_loader

acc = evaluate(model, test_loader)
print(f"acc={flor.log('test_acc', acc):.2f}")
