"""``tg.nn``'s module classes, one file per kind as torch/nn/modules/."""
from __future__ import annotations

from .attention import MultiheadAttention
from .activation import (ELU, GELU, Hardtanh, LeakyReLU, LogSigmoid, LogSoftmax, Mish, ReLU, ReLU6, Sigmoid, SiLU,
                         Softmax, Softplus, Tanh)
from .batchnorm import BatchNorm1d, BatchNorm2d
from .conv import Conv1d, Conv2d, ConvTranspose2d
from .container import ModuleDict, ModuleList, ParameterDict, ParameterList, Sequential
from .dropout import Dropout, Dropout2d
from .linear import Bilinear, Flatten, Identity, Linear, Unflatten
from .loss import (BCELoss, BCEWithLogitsLoss, CrossEntropyLoss, HuberLoss, KLDivLoss, L1Loss, MSELoss, NLLLoss,
                   SmoothL1Loss, CosineEmbeddingLoss, TripletMarginLoss)
from .module import Module
from .normalization import GroupNorm, LayerNorm
from .pooling import AdaptiveAvgPool2d, AvgPool1d, AvgPool2d, MaxPool1d, MaxPool2d, Upsample
from .rnn import GRU, LSTM, RNN, GRUCell, LSTMCell, RNNBase, RNNCell, RNNCellBase
from .sparse import Embedding
from .transformer import (Transformer, TransformerDecoder, TransformerDecoderLayer, TransformerEncoder,
                          TransformerEncoderLayer)

__all__ = ["Module", "Sequential", "ModuleList", "ModuleDict", "ParameterList", "ParameterDict", "Identity", "Linear", "Conv1d", "Conv2d", "ConvTranspose2d", "MaxPool1d", "MaxPool2d", "AvgPool1d",
           "AvgPool2d", "AdaptiveAvgPool2d", "Upsample", "GroupNorm", "Dropout2d", "BatchNorm1d", "BatchNorm2d", "RNNBase", "RNN", "LSTM", "GRU",
           "RNNCellBase", "RNNCell", "LSTMCell", "GRUCell",
           "Bilinear", "Flatten", "Unflatten", "ReLU", "Tanh", "Sigmoid", "GELU", "Softplus", "Softmax", "LogSoftmax",
           "SiLU", "LeakyReLU", "ELU", "Hardtanh", "ReLU6", "Mish", "LogSigmoid", "Dropout", "Embedding", "LayerNorm",
           "MultiheadAttention", "Transformer", "TransformerEncoder", "TransformerDecoder", "TransformerEncoderLayer",
           "TransformerDecoderLayer",
           "L1Loss", "MSELoss", "CrossEntropyLoss", "NLLLoss", "BCELoss", "BCEWithLogitsLoss", "SmoothL1Loss", "HuberLoss",
           "KLDivLoss", "CosineEmbeddingLoss", "TripletMarginLoss"]
