"""A multilayer perceptron in numpy: ReLU hidden layers, softmax cross-entropy at the end.

Losses and gradients are *sums* over the samples given, not means: summed over ranks and divided
by the global batch size they equal the serial mean exactly, however unevenly the batch was split.
"""

from __future__ import annotations

import numpy as np

Params = list[np.ndarray]  # [W1, b1, W2, b2, ...]


def init_mlp(sizes: list[int], seed: int = 0) -> Params:
    """Weights for layers ``sizes[0] -> sizes[1] -> ...`` (He initialisation), biases zero."""
    rng = np.random.default_rng(seed)
    params: Params = []
    for fan_in, fan_out in zip(sizes[:-1], sizes[1:]):
        params.append(rng.normal(0.0, np.sqrt(2.0 / fan_in), size=(fan_in, fan_out)))
        params.append(np.zeros(fan_out))
    return params


def layer_forward(W: np.ndarray, b: np.ndarray, x: np.ndarray, last: bool) -> tuple[np.ndarray, tuple]:
    """One layer: ``x @ W + b``, then ReLU unless it is the last layer (which returns logits)."""
    z = x @ W + b
    return (z if last else np.maximum(z, 0.0)), (x, z)


def layer_backward(W: np.ndarray, cache: tuple, grad_out: np.ndarray, last: bool):
    """Gradients of one layer: ``(grad wrt its input, dW, db)``, given the grad wrt its output."""
    x, z = cache
    dz = grad_out if last else grad_out * (z > 0)
    return dz @ W.T, x.T @ dz, dz.sum(axis=0)


def loss_grad(logits: np.ndarray, y: np.ndarray) -> tuple[float, np.ndarray]:
    """Summed softmax cross-entropy of the batch, and its gradient wrt the logits."""
    shifted = logits - logits.max(axis=1, keepdims=True)
    log_probs = shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))
    loss = -float(log_probs[np.arange(len(y)), y].sum())
    grad = np.exp(log_probs)
    grad[np.arange(len(y)), y] -= 1.0
    return loss, grad


def loss_and_grads(params: Params, X: np.ndarray, y: np.ndarray) -> tuple[float, Params]:
    """Summed loss over the samples, and the summed gradient of every parameter."""
    layers = len(params) // 2
    caches, h = [], X
    for i in range(layers):
        h, cache = layer_forward(params[2 * i], params[2 * i + 1], h, last=i == layers - 1)
        caches.append(cache)
    loss, grad = loss_grad(h, y)
    grads: Params = [np.empty(0)] * len(params)
    for i in reversed(range(layers)):
        grad, grads[2 * i], grads[2 * i + 1] = layer_backward(params[2 * i], caches[i], grad, last=i == layers - 1)
    return loss, grads


def sgd_step(params: Params, summed_grads: Params, n_samples: int, lr: float) -> Params:
    """Plain SGD on the mean gradient: summed gradients divided by the global batch size."""
    return [p - lr * g / n_samples for p, g in zip(params, summed_grads)]


def accuracy(params: Params, X: np.ndarray, y: np.ndarray) -> float:
    layers = len(params) // 2
    h = X
    for i in range(layers):
        h, _ = layer_forward(params[2 * i], params[2 * i + 1], h, last=i == layers - 1)
    return float(np.mean(h.argmax(axis=1) == y))
