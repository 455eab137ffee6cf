"""Recurrent layers, as torch/nn/modules/rnn.py: ``RNN`` (tanh or relu), ``LSTM`` (with
``proj_size``), ``GRU`` and their cells. torch's parameter names, shapes, order and
initialization (U(-1/sqrt(hidden_size), 1/sqrt(hidden_size))), gate order (LSTM: input,
forget, cell, output; GRU: reset, update, new, with the reset gate applied to the hidden
part of the new gate), ``batch_first``, unbatched inputs, ``bidirectional``, dropout between
layers, and its error messages. Each layer and direction runs as torch's reference loop: the
input projection of every time step in one product, then one step at a time; a composition
of ops (Note [Composite functionals] in threadgrad/nn/functional.py)."""
from __future__ import annotations

import math
import warnings
from typing import Any

from ... import ops
from ...engine import creation
from ...engine.tensor import Tensor
from .. import functional as F
from .. import init
from ..parameter import Parameter
from .module import Module

_GATES = {"RNN_TANH": 1, "RNN_RELU": 1, "LSTM": 4, "GRU": 3}


def _size(shape: Any) -> str:
    return f"[{', '.join(str(int(n)) for n in shape)}]"


def _linear(x: Tensor, w: Tensor, b: Any) -> Tensor:
    return F.linear(x, w, b)


def _cell(mode: str, x_proj: Tensor, h: Tensor, c: Any, w_hh: Tensor, b_hh: Any, w_hr: Any) -> tuple:
    """One time step from the input's projection ``x_proj`` (with ``b_ih``) and the state."""
    if mode == "GRU":
        gi_r, gi_z, gi_n = ops.split(x_proj, x_proj.shape[-1] // 3, dim=-1)
        gh_r, gh_z, gh_n = ops.split(_linear(h, w_hh, b_hh), x_proj.shape[-1] // 3, dim=-1)
        r = ops.sigmoid(ops.add(gi_r, gh_r))
        z = ops.sigmoid(ops.add(gi_z, gh_z))
        n = ops.tanh(ops.add(gi_n, ops.mul(r, gh_n)))
        return ops.add(ops.mul(ops.sub(1.0, z), n), ops.mul(z, h)), None
    gates = ops.add(x_proj, _linear(h, w_hh, b_hh))
    if mode == "LSTM":
        i, f, g, o = ops.split(gates, gates.shape[-1] // 4, dim=-1)
        c = ops.add(ops.mul(ops.sigmoid(f), c), ops.mul(ops.sigmoid(i), ops.tanh(g)))
        h = ops.mul(ops.sigmoid(o), ops.tanh(c))
        if w_hr is not None:
            h = _linear(h, w_hr, None)
        return h, c
    return (ops.tanh(gates) if mode == "RNN_TANH" else ops.relu(gates)), None


class RNNBase(Module):
    """The recurrent layers' common part (torch's ``RNNBase``)."""

    def __init__(self, mode: str, input_size: int, hidden_size: int, num_layers: int = 1, bias: bool = True,
                 batch_first: bool = False, dropout: float = 0.0, bidirectional: bool = False, proj_size: int = 0,
                 device: Any = None, dtype: Any = None) -> None:
        super().__init__()
        self.mode, self.input_size, self.hidden_size, self.num_layers = mode, input_size, hidden_size, num_layers
        self.bias, self.batch_first, self.dropout = bias, batch_first, float(dropout)
        self.bidirectional, self.proj_size = bidirectional, proj_size
        if not isinstance(dropout, (int, float)) or not 0 <= dropout <= 1 or isinstance(dropout, bool):
            raise ValueError("dropout should be a number in range [0, 1] representing the probability of an element "
                             "being zeroed")
        if dropout > 0 and num_layers == 1:
            warnings.warn("dropout option adds dropout after all but last recurrent layer, so non-zero dropout "
                          f"expects num_layers greater than 1, but got dropout={dropout} and num_layers={num_layers}",
                          stacklevel=2)
        if not isinstance(hidden_size, int):
            raise TypeError(f"hidden_size should be of type int, got: {type(hidden_size).__name__}")
        if hidden_size <= 0:
            raise ValueError("hidden_size must be greater than zero")
        if num_layers <= 0:
            raise ValueError("num_layers must be greater than zero")
        if proj_size < 0:
            raise ValueError("proj_size should be a positive integer or zero to disable projections")
        if proj_size >= hidden_size:
            raise ValueError("proj_size has to be smaller than hidden_size")
        if mode not in _GATES:
            raise ValueError(f"Unrecognized RNN mode: {mode}")
        gate_size = _GATES[mode] * hidden_size
        real_hidden = proj_size if proj_size > 0 else hidden_size
        directions = 2 if bidirectional else 1
        kw = {"device": device, "dtype": dtype}
        self._flat_weights_names: list[str] = []
        for layer in range(num_layers):
            for direction in range(directions):
                layer_input = input_size if layer == 0 else real_hidden * directions
                suffix = "_reverse" if direction == 1 else ""
                params = [(f"weight_ih_l{layer}{suffix}", (gate_size, layer_input)),
                          (f"weight_hh_l{layer}{suffix}", (gate_size, real_hidden))]
                if bias:
                    params += [(f"bias_ih_l{layer}{suffix}", (gate_size,)), (f"bias_hh_l{layer}{suffix}", (gate_size,))]
                if proj_size > 0:
                    params.append((f"weight_hr_l{layer}{suffix}", (proj_size, hidden_size)))
                for name, shape in params:
                    setattr(self, name, Parameter(creation.empty(*shape, **kw)))
                    self._flat_weights_names.append(name)
        self.reset_parameters()

    @property
    def _flat_weights(self) -> list:
        return [getattr(self, name) for name in self._flat_weights_names]

    def flatten_parameters(self) -> None:
        """A no-op, as torch's outside cuDNN (threadgrad keeps each parameter on its own)."""

    def reset_parameters(self) -> None:
        stdv = 1.0 / math.sqrt(self.hidden_size) if self.hidden_size > 0 else 0
        for weight in self.parameters():
            init.uniform_(weight, -stdv, stdv)

    def extra_repr(self) -> str:
        s = f"{self.input_size}, {self.hidden_size}"
        if self.proj_size != 0:
            s += f", proj_size={self.proj_size}"
        if self.num_layers != 1:
            s += f", num_layers={self.num_layers}"
        if self.bias is not True:
            s += f", bias={self.bias}"
        if self.batch_first is not False:
            s += f", batch_first={self.batch_first}"
        if self.dropout != 0:
            s += f", dropout={self.dropout}"
        if self.bidirectional is not False:
            s += f", bidirectional={self.bidirectional}"
        return s

    def _state_shape(self, batch: int, cell: bool) -> tuple:
        directions = 2 if self.bidirectional else 1
        size = self.hidden_size if cell or self.proj_size == 0 else self.proj_size
        return (self.num_layers * directions, batch, size)

    def _check_state(self, h: Tensor, expected: tuple, what: str = "hidden") -> None:
        if tuple(h.shape) != expected:
            raise RuntimeError(f"Expected {what} size {tuple(expected)}, got {_size(h.shape)}")

    def forward(self, input: Tensor, hx: Any = None) -> tuple:  # noqa: A002
        lstm = self.mode == "LSTM"
        batched = input.ndim == 3
        if input.ndim not in (2, 3):
            raise ValueError(f"{type(self).__name__}: Expected input to be 2D or 3D, got {input.ndim}D tensor instead")
        if input.shape[-1] != self.input_size:
            raise RuntimeError(f"input.size(-1) must be equal to input_size. Expected {self.input_size}, "
                               f"got {input.shape[-1]}")
        x = input if batched else ops.unsqueeze(input, 1)
        if batched and self.batch_first:
            x = ops.transpose(x, 0, 1)  # (L, N, I) from here on
        seq, batch = x.shape[0], x.shape[1]
        states = [hx] if not lstm or hx is None else list(hx)
        if hx is not None:
            if not batched:
                for s in states:
                    if s.ndim != 2:
                        raise RuntimeError(f"For unbatched 2-D input, hx should also be 2-D but got {s.ndim}-D tensor")
                states = [ops.unsqueeze(s, 1) for s in states]
            elif any(s.ndim != 3 for s in states):
                bad = next(s for s in states if s.ndim != 3)
                raise RuntimeError(f"For batched 3-D input, hx should also be 3-D but got {bad.ndim}-D tensor")
            self._check_state(states[0], self._state_shape(batch, False), "hidden[0]" if lstm else "hidden")
            if lstm:
                self._check_state(states[1], self._state_shape(batch, True), "hidden[1]")
        else:
            states = [creation.zeros(*self._state_shape(batch, False), dtype=input.dtype, device=input.device)]
            if lstm:
                states.append(creation.zeros(*self._state_shape(batch, True), dtype=input.dtype, device=input.device))
        directions = 2 if self.bidirectional else 1
        h_out, c_out = [], []
        layer_input = x
        for layer in range(self.num_layers):
            outputs = []
            for direction in range(directions):
                suffix = "_reverse" if direction == 1 else ""
                w_ih, w_hh = getattr(self, f"weight_ih_l{layer}{suffix}"), getattr(self, f"weight_hh_l{layer}{suffix}")
                b_ih = getattr(self, f"bias_ih_l{layer}{suffix}") if self.bias else None
                b_hh = getattr(self, f"bias_hh_l{layer}{suffix}") if self.bias else None
                w_hr = getattr(self, f"weight_hr_l{layer}{suffix}") if self.proj_size > 0 else None
                k = layer * directions + direction
                h = states[0][k]
                c = states[1][k] if lstm else None
                projected = _linear(layer_input, w_ih, b_ih)  # every time step's input part at once
                steps = range(seq - 1, -1, -1) if direction == 1 else range(seq)
                hs: list = [None] * seq
                for t in steps:
                    h, c = _cell(self.mode, projected[t], h, c, w_hh, b_hh, w_hr)
                    hs[t] = h
                outputs.append(ops.stack(hs) if seq else creation.zeros(0, batch, h.shape[-1], dtype=h.dtype))
                h_out.append(h)
                if lstm:
                    c_out.append(c)
            layer_input = outputs[0] if directions == 1 else ops.cat(outputs, dim=-1)
            if self.dropout and self.training and layer < self.num_layers - 1:
                layer_input = F.dropout(layer_input, self.dropout, True)
        output = layer_input
        h_n = ops.stack(h_out)
        c_n = ops.stack(c_out) if lstm else None
        if batched and self.batch_first:
            output = ops.transpose(output, 0, 1)
        if not batched:
            output, h_n = ops.squeeze(output, 1), ops.squeeze(h_n, 1)
            c_n = ops.squeeze(c_n, 1) if lstm else None
        return (output, (h_n, c_n)) if lstm else (output, h_n)


class RNN(RNNBase):
    """``RNN(input_size, hidden_size, num_layers=1, nonlinearity='tanh', bias=True,
    batch_first=False, dropout=0.0, bidirectional=False)``: ``h_t = tanh(x_t W_ih^T + b_ih +
    h_{t-1} W_hh^T + b_hh)`` (or relu)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        if "proj_size" in kwargs:
            raise ValueError("proj_size argument is only supported for LSTM, not RNN or GRU")
        nonlinearity = kwargs.pop("nonlinearity", "tanh")
        if len(args) > 3:
            nonlinearity = args[3]
            args = args[:3] + args[4:]
        if nonlinearity == "tanh":
            mode = "RNN_TANH"
        elif nonlinearity == "relu":
            mode = "RNN_RELU"
        else:
            raise ValueError(f"Unknown nonlinearity '{nonlinearity}'. Select from 'tanh' or 'relu'.")
        super().__init__(mode, *args, **kwargs)
        self.nonlinearity = nonlinearity  # (not in the repr, as torch's)


class LSTM(RNNBase):
    """``LSTM(input_size, hidden_size, num_layers=1, bias=True, batch_first=False, dropout=0.0,
    bidirectional=False, proj_size=0)``; ``forward(input, (h_0, c_0))`` returns
    ``output, (h_n, c_n)``."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__("LSTM", *args, **kwargs)


class GRU(RNNBase):
    """``GRU(input_size, hidden_size, num_layers=1, bias=True, batch_first=False, dropout=0.0,
    bidirectional=False)``."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        if "proj_size" in kwargs:
            raise ValueError("proj_size argument is only supported for LSTM, not RNN or GRU")
        super().__init__("GRU", *args, **kwargs)


class RNNCellBase(Module):
    """The cells' common part: ``weight_ih`` (gates*hidden, input), ``weight_hh`` (gates*hidden,
    hidden), ``bias_ih``, ``bias_hh``; forward on (N, input) or unbatched (input,)."""

    def __init__(self, mode: str, input_size: int, hidden_size: int, bias: bool = True, device: Any = None,
                 dtype: Any = None) -> None:
        super().__init__()
        self.mode, self.input_size, self.hidden_size, self.bias = mode, input_size, hidden_size, bias
        kw = {"device": device, "dtype": dtype}
        gates = _GATES[mode] * hidden_size
        self.weight_ih = Parameter(creation.empty(gates, input_size, **kw))
        self.weight_hh = Parameter(creation.empty(gates, hidden_size, **kw))
        if bias:
            self.bias_ih = Parameter(creation.empty(gates, **kw))
            self.bias_hh = Parameter(creation.empty(gates, **kw))
        else:
            self.register_parameter("bias_ih", None)
            self.register_parameter("bias_hh", None)
        self.reset_parameters()

    reset_parameters = RNNBase.reset_parameters  # every parameter U(-1/sqrt(hidden), 1/sqrt(hidden))

    def extra_repr(self) -> str:
        s = f"{self.input_size}, {self.hidden_size}"
        if self.bias is not True:
            s += f", bias={self.bias}"
        if getattr(self, "nonlinearity", "tanh") != "tanh":
            s += f", nonlinearity={self.nonlinearity}"
        return s

    def forward(self, input: Tensor, hx: Any = None) -> Any:  # noqa: A002
        if input.ndim not in (1, 2):
            raise ValueError(f"{type(self).__name__}: Expected input to be 1D or 2D, got {input.ndim}D instead")
        if input.shape[-1] != self.input_size:
            raise RuntimeError(f"input has inconsistent input_size: got {input.shape[-1]} expected {self.input_size}")
        batched = input.ndim == 2
        x = input if batched else ops.unsqueeze(input, 0)
        lstm = self.mode == "LSTM"
        if hx is None:
            zeros = creation.zeros(x.shape[0], self.hidden_size, dtype=input.dtype, device=input.device)
            h, c = zeros, (zeros if lstm else None)
        else:
            h, c = (hx if lstm else (hx, None))
            if not batched:
                h = ops.unsqueeze(h, 0)
                c = ops.unsqueeze(c, 0) if lstm else None
        h, c = _cell(self.mode, _linear(x, self.weight_ih, self.bias_ih), h, c, self.weight_hh, self.bias_hh, None)
        if not batched:
            h = ops.squeeze(h, 0)
            c = ops.squeeze(c, 0) if lstm else None
        return (h, c) if lstm else h


class RNNCell(RNNCellBase):
    """``RNNCell(input_size, hidden_size, bias=True, nonlinearity='tanh')``."""

    def __init__(self, input_size: int, hidden_size: int, bias: bool = True, nonlinearity: str = "tanh",
                 device: Any = None, dtype: Any = None) -> None:
        if nonlinearity not in ("tanh", "relu"):
            raise RuntimeError(f"Unknown nonlinearity: {nonlinearity}")
        super().__init__("RNN_TANH" if nonlinearity == "tanh" else "RNN_RELU", input_size, hidden_size, bias,
                         device, dtype)
        self.nonlinearity = nonlinearity


class LSTMCell(RNNCellBase):
    """``LSTMCell(input_size, hidden_size, bias=True)``; ``forward(input, (h, c))`` returns ``(h', c')``."""

    def __init__(self, input_size: int, hidden_size: int, bias: bool = True, device: Any = None,
                 dtype: Any = None) -> None:
        super().__init__("LSTM", input_size, hidden_size, bias, device, dtype)


class GRUCell(RNNCellBase):
    """``GRUCell(input_size, hidden_size, bias=True)``."""

    def __init__(self, input_size: int, hidden_size: int, bias: bool = True, device: Any = None,
                 dtype: Any = None) -> None:
        super().__init__("GRU", input_size, hidden_size, bias, device, dtype)
