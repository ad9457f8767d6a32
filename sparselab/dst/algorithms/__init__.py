"""The dynamic-sparse-training algorithms, one per file."""

from .gmp import GMP
from .granet import GraNet
from .rigl import RigL
from .set import SET
from .snfs import SNFS
from .srigl import SRigL
from .static import Static
from .topkast import ForwardSet, TopKAST

__all__ = ["Static", "SET", "RigL", "SRigL", "SNFS", "GMP", "GraNet", "TopKAST", "ForwardSet"]
