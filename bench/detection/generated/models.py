"""The models a draw builds, written as people write them (``nn.Sequential`` where it fits,
a small ``nn.Module`` with a ``head`` where it does not)."""

from __future__ import annotations

from itertools import pairwise
from typing import cast

import torch
from torch import nn
from torch.nn import functional as F

from bench.detection.generated.data import Data
from bench.detection.generated.space import Draw

ACTIVATIONS: dict[str, type[nn.Module]] = {
    "relu": nn.ReLU,
    "tanh": nn.Tanh,
    "gelu": nn.GELU,
    "leaky_relu": nn.LeakyReLU,
}


def mlp(sizes: list[int], act: type[nn.Module], dropout: float = 0.0) -> list[nn.Module]:
    layers: list[nn.Module] = []
    for i in range(len(sizes) - 1):
        layers.append(nn.Linear(sizes[i], sizes[i + 1]))
        if i < len(sizes) - 2:
            layers.append(act())
            if dropout:
                layers.append(nn.Dropout(dropout))
    return layers


class RecurrentNet(nn.Module):
    """A GRU or LSTM over the sequence, its last hidden state through a linear head."""

    def __init__(self, d: Draw, data: Data, out: int, probabilities: bool = False) -> None:
        super().__init__()
        rnn = nn.GRU if d.arch == "gru" else nn.LSTM
        self.rnn = rnn(data.in_features, d.hidden[0], batch_first=True)
        self.dropout = nn.Dropout(d.dropout)
        self.head = nn.Linear(d.hidden[0], out)
        self.probabilities = probabilities

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        seq, _ = self.rnn(x)
        out = self.head(self.dropout(seq[:, -1]))
        return F.softmax(out, dim=1) if self.probabilities else out


class ReluRecurrence(nn.Module):
    """A ReLU recurrence ``h = relu(W x_t + U h + b)`` written as a loop over time
    (``nn.RNNCell``), the last state through a linear head."""

    def __init__(self, in_features: int, hidden: int, out: int, unrolled: bool) -> None:
        super().__init__()
        self.unrolled = unrolled
        if unrolled:
            self.cell = nn.RNNCell(in_features, hidden, nonlinearity="relu")
        else:
            self.rnn = nn.RNN(in_features, hidden, nonlinearity="relu", batch_first=True)
        self.head = nn.Linear(hidden, out)

    def recurrent_weight(self) -> torch.Tensor:
        weight = self.cell.weight_hh if self.unrolled else self.rnn.weight_hh_l0
        return cast(torch.Tensor, weight)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.unrolled:
            seq, _ = self.rnn(x)
            out: torch.Tensor = self.head(seq[:, -1])
            return out
        h = x.new_zeros(x.shape[0], self.cell.hidden_size)
        for t in range(x.shape[1]):
            h = self.cell(x[:, t], h)
        out = self.head(h)
        return out


class ResidualMLP(nn.Module):
    """A stem, residual blocks ``h + Linear(act(Linear(h)))``, a LayerNorm (or not), a head."""

    def __init__(self, d: Draw, data: Data, out: int, probabilities: bool = False) -> None:
        super().__init__()
        act = ACTIVATIONS[d.activation]
        width = d.hidden[0]
        self.stem = nn.Sequential(nn.Linear(data.in_features, width), act())
        blocks = []
        for _ in d.hidden:
            layers: list[nn.Module] = [nn.Linear(width, width), act()]
            layers += [nn.Dropout(d.dropout)] if d.dropout else []
            blocks.append(nn.Sequential(*layers, nn.Linear(width, width)))
        self.blocks = nn.ModuleList(blocks)
        self.norm = nn.LayerNorm(width) if d.batchnorm else nn.Identity()
        self.head = nn.Linear(width, out)
        self.probabilities = probabilities

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.stem(x)
        for block in self.blocks:
            h = h + block(h)
        out = self.head(self.norm(h))
        return F.softmax(out, dim=1) if self.probabilities else out


class SequenceCNN(nn.Module):
    """Two 1-D convolutions over time (ReLU, BatchNorm or not), the mean over time and the last
    step's features, a linear head."""

    def __init__(self, d: Draw, data: Data, out: int, probabilities: bool = False) -> None:
        super().__init__()
        c1, c2 = d.hidden
        layers: list[nn.Module] = [nn.Conv1d(data.in_features, c1, 3, padding=1)]
        layers += [nn.BatchNorm1d(c1)] if d.batchnorm else []
        layers += [nn.ReLU(), nn.Conv1d(c1, c2, 3, padding=1)]
        layers += [nn.BatchNorm1d(c2)] if d.batchnorm else []
        layers += [nn.ReLU()]
        self.features = nn.Sequential(*layers)
        self.dropout = nn.Dropout(d.dropout)
        self.head = nn.Linear(2 * c2, out)
        self.probabilities = probabilities

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.features(x.transpose(1, 2))
        pooled = torch.cat([h.mean(dim=2), h[:, :, -1]], dim=1)
        out = self.head(self.dropout(pooled))
        return F.softmax(out, dim=1) if self.probabilities else out


class SequenceTransformer(nn.Module):
    """A small transformer encoder: a linear embedding plus learned positions, mean pooling,
    a linear head."""

    def __init__(self, d: Draw, data: Data, out: int, probabilities: bool = False) -> None:
        super().__init__()
        self.embed = nn.Linear(data.in_features, d.d_model)
        self.pos = nn.Embedding(d.seq_len, d.d_model)
        layer = nn.TransformerEncoderLayer(
            d.d_model, d.n_heads, 2 * d.d_model, d.dropout, batch_first=True
        )
        self.encoder = nn.TransformerEncoder(layer, d.n_layers, enable_nested_tensor=False)
        self.head = nn.Linear(d.d_model, out)
        self.probabilities = probabilities

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.embed(x) + self.pos.weight[: x.shape[1]]
        out = self.head(self.encoder(h).mean(dim=1))
        return F.softmax(out, dim=1) if self.probabilities else out


class AutoEncoder(nn.Module):
    """An MLP encoder down to a small code and a mirrored decoder (sigmoid output for inputs
    in [0, 1])."""

    def __init__(self, d: Draw, data: Data) -> None:
        super().__init__()
        act = ACTIVATIONS[d.activation]
        sizes = [data.in_features, *d.hidden]
        self.encoder = nn.Sequential(*mlp(sizes, act))
        decoder = mlp(sizes[::-1], act)
        if d.sigmoid_output:
            decoder.append(nn.Sigmoid())
        self.decoder = nn.Sequential(*decoder)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.decoder(self.encoder(x))


def build(
    d: Draw, data: Data, softmax_output: bool = False, recurrence: str | None = None
) -> nn.Module:
    """The draw's model. ``softmax_output`` ends a classifier with a softmax (a fault);
    ``recurrence`` ("relu_rnn": ``nn.RNN``, "relu_cell": ``nn.RNNCell`` in a loop) replaces a
    sequence model with a plain ReLU recurrence (a fault)."""
    out = data.n_classes or (data.in_features if d.arch == "autoencoder" else 1)
    layers: list[nn.Module]
    if recurrence is not None:
        return ReluRecurrence(data.in_features, 32, out, unrolled=recurrence == "relu_cell")
    if d.arch == "resmlp":
        return ResidualMLP(d, data, out, softmax_output)
    if d.arch == "cnn1d":
        return SequenceCNN(d, data, out, softmax_output)
    if d.arch in ("logreg", "linreg"):
        if not softmax_output:
            return nn.Linear(data.in_features, out)
        layers = [nn.Linear(data.in_features, out)]
    elif d.arch == "mlp":
        sizes = [data.in_features, *d.hidden, out]
        layers = mlp(sizes, ACTIVATIONS[d.activation], d.dropout)
    elif d.arch == "cnn":
        c1, c2 = d.hidden
        layers = [nn.Conv2d(1, c1, 3, padding=1)]
        layers += [nn.BatchNorm2d(c1)] if d.batchnorm else []
        layers += [nn.ReLU(), nn.MaxPool2d(2), nn.Conv2d(c1, c2, 3, padding=1)]
        layers += [nn.BatchNorm2d(c2)] if d.batchnorm else []
        layers += [nn.ReLU(), nn.AdaptiveAvgPool2d(2), nn.Flatten()]
        layers += [nn.Dropout(d.dropout)] if d.dropout else []
        layers.append(nn.Linear(4 * c2, out))
    elif d.arch in ("gru", "lstm"):
        return RecurrentNet(d, data, out, softmax_output)
    elif d.arch == "transformer":
        return SequenceTransformer(d, data, out, softmax_output)
    elif d.arch == "autoencoder":
        return AutoEncoder(d, data)
    else:
        raise ValueError(f"unknown architecture {d.arch}")
    if softmax_output:
        layers.append(nn.Softmax(dim=1))
    return nn.Sequential(*layers)


def param_layers(model: nn.Module) -> list[nn.Module]:
    """The modules that own parameters directly, in order: the first is the input layer, the
    last the head."""
    return [m for m in model.modules() if next(m.parameters(recurse=False), None) is not None]


def head(model: nn.Module) -> nn.Module:
    found = getattr(model, "head", None)
    return found if isinstance(found, nn.Module) else param_layers(model)[-1]


def activations_before(model: nn.Module, kinds: tuple[type[nn.Module], ...]) -> list[nn.Module]:
    """The layers (Linear, Conv2d, or the BatchNorm after one) whose output goes straight into
    an activation of one of ``kinds`` inside a Sequential."""
    found: list[nn.Module] = []
    for seq in model.modules():
        if isinstance(seq, nn.Sequential):
            mods = list(seq)
            for a, b in pairwise(mods):
                linear = nn.Linear | nn.Conv1d | nn.Conv2d | nn.BatchNorm1d | nn.BatchNorm2d
                if isinstance(a, linear) and isinstance(b, kinds):
                    found.append(a)
    return found
