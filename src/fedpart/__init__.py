"""fedpart: personalized federated learning by partial (layer-wise) model sharing."""

from fedpart.algorithms.base import Algorithm
from fedpart.api import resume, run
from fedpart.config import Config, load_config, option
from fedpart.data.registry import DatasetBundle, register_dataset
from fedpart.engine.simulation import Result
from fedpart.errors import ConfigError, DataError, FedpartError, TrainingError
from fedpart.models import BlockModel, register_model
from fedpart.registry import register_algorithm

__version__ = "0.1.0"

__all__ = [
    "Algorithm",
    "BlockModel",
    "Config",
    "ConfigError",
    "DataError",
    "DatasetBundle",
    "FedpartError",
    "Result",
    "TrainingError",
    "load_config",
    "option",
    "register_algorithm",
    "register_dataset",
    "register_model",
    "resume",
    "run",
]
