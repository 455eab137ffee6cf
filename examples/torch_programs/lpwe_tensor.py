"""\"Learning PyTorch with Examples\": PyTorch: Tensors, ported to threadgrad.

Original: pytorch/tutorials, ``beginner_source/examples_tensor/polynomial_tensor.py``
(BSD-3-Clause): a cubic fitted to sin(x) with tensors and hand-written gradients.

Changed from the original: the import line (``torch`` -> ``threadgrad``), and the three
``torch.matmul(input=..., other=...)`` calls pass their operands by position: threadgrad's
``matmul`` names its parameters ``a, b``, not torch's ``input, other`` (ops/linalg.py; a
difference listed in docs/porting.md).
tests/torch_programs runs it against torch.
"""

import math
import threadgrad as torch


dtype = torch.float
device = torch.device("cpu")
# device = torch.device("cuda:0") # Uncomment this to run on GPU

# Create random input and output data
x = torch.linspace(-math.pi, math.pi, 2000, device=device, dtype=dtype)
y = torch.sin(x)

# Randomly initialize weights
a = torch.randn((), device=device, dtype=dtype)
b = torch.randn((), device=device, dtype=dtype)
c = torch.randn((), device=device, dtype=dtype)
d = torch.randn((), device=device, dtype=dtype)

learning_rate = 1e-6
for t in range(2000):
    # Forward pass: compute predicted y
    y_pred = a + (b * x) + (c * x.pow(2)) + (d * x.pow(3))

    # Compute and print loss
    loss = (y_pred - y).pow(2).sum().item()
    if t % 100 == 99:
        print(t, loss)

    # Backprop to compute gradients of a, b, c, d with respect to loss
    grad_y_pred = -2.0 * (y - y_pred)
    grad_a = grad_y_pred.sum()
    # threadgrad: matmul's parameters are not named input/other (see the docstring)
    grad_b = torch.matmul(grad_y_pred, x).sum()
    grad_c = torch.matmul(grad_y_pred, x.pow(2)).sum()
    grad_d = torch.matmul(grad_y_pred, x.pow(3)).sum()

    # Update weights using gradient descent
    a -= learning_rate * grad_a
    b -= learning_rate * grad_b
    c -= learning_rate * grad_c
    d -= learning_rate * grad_d


print(f'Result: y = {a.item()} + {b.item()} x + {c.item()} x^2 + {d.item()} x^3')
