import florwb as flor
import numpy as np
from sklearn.linear_model import SGDClassifier
from sklearn.datasets import load_digits

# --- data ---
X, y = load_digits(return_X_y = True)
clf = SGDClassifier(loss='log_loss', alpha=flor.arg('alpha', 1e-4))   # linear model
classes = np.unique( y )

for epoch in flor.loop('epoch', range(flor.arg('epochs', 20))):
    perm = np.random.permutation(len(X))
    # mini-batches of 64
    for start in range(0, len(X), 64):
        idx = perm[start:start+64]
        clf.partial_fit(X[idx], y[idx], classes=classes)

    acc = clf.score(X, y)      # training accuracy
    flor.log("train_acc", acc)

    # TODO: early stopping
