import florwb as flor
import numpy as np

w = np.zeros(3)
for it in flor.loop("it", range(100)):
    grad = np.random.randn(3)
    w -= 0.1 * grad
print(w)
