"""The model zoo: every model is a :class:`BlockModel` with ordered, named blocks.

``build_model(name, num_classes=, input_shape=, **options)`` builds a registered model;
:data:`MODELS` lists them with their options. See ``docs/models.md``; a model of one's own:
``docs/extending.md``.
"""

from fedpart.models import cnn, mlp, resnet, vgg  # noqa: F401  (registers the models)
from fedpart.models.base import BlockModel, batchnorm_keys, count_parameters
from fedpart.models.cnn import FedAvgCNN, LeNet5, Pa3dFLCNN
from fedpart.models.mlp import MLP
from fedpart.models.registry import (
    MODELS,
    ModelInfo,
    SequentialModel,
    build_model,
    register_model,
)
from fedpart.models.resnet import ResNet18
from fedpart.models.vgg import VGG11

__all__ = [
    "MLP",
    "MODELS",
    "VGG11",
    "BlockModel",
    "FedAvgCNN",
    "LeNet5",
    "ModelInfo",
    "Pa3dFLCNN",
    "ResNet18",
    "SequentialModel",
    "batchnorm_keys",
    "build_model",
    "count_parameters",
    "register_model",
]
