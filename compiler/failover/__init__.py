"""The failover plan: what really happens when serving pods fail (per failure mode, from
what the cluster and the compiled clients do), what the takeover sends against its QoS
caps, and what a new generation costs until every pod serves it; every number says where
it comes from (``numbers.Num``)."""

from compiler.failover import calibration
from compiler.failover.inputs import (
    MODE_TITLES,
    Clients,
    Cluster,
    Inputs,
    Probe,
    Rollout,
    Takeover,
    TierRollout,
)
from compiler.failover.numbers import Num, Step, declared_or_default
from compiler.failover.plan import FailoverPlan, analyse, assess, numbers

__all__ = [
    "MODE_TITLES",
    "Clients",
    "Cluster",
    "FailoverPlan",
    "Inputs",
    "Num",
    "Probe",
    "Rollout",
    "Step",
    "Takeover",
    "TierRollout",
    "analyse",
    "assess",
    "calibration",
    "declared_or_default",
    "numbers",
]
