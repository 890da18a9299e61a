"""Step 3: derive every value the renderers need, once, with units spelled out.

The plan is the renderers' only input: names, selectors, rates and the settings
of each section are looked up here, never re-derived from the spec. The data types are
in ``compiler.plan.model``; ``compiler.plan.builders`` fills them from an admitted spec.
"""

from compiler.plan.builders import DEFAULT_BRIDGE_MS as DEFAULT_BRIDGE_MS
from compiler.plan.builders import REPORT_MARGIN_MS as REPORT_MARGIN_MS
from compiler.plan.builders import STORE_PORT as STORE_PORT
from compiler.plan.builders import build as build
from compiler.plan.builders import job_deadline_s as job_deadline_s
from compiler.plan.builders import report_bridge_ms as report_bridge_ms
from compiler.plan.model import NAMESPACE_SENTINEL as NAMESPACE_SENTINEL
from compiler.plan.model import EnginePlan as EnginePlan
from compiler.plan.model import JobPlan as JobPlan
from compiler.plan.model import JobPod as JobPod
from compiler.plan.model import Plan as Plan
from compiler.plan.model import ReloadPlan as ReloadPlan
from compiler.plan.model import StorePlan as StorePlan
from compiler.plan.model import SyncPlan as SyncPlan
from compiler.plan.model import TierPlan as TierPlan
from compiler.plan.model import allowlist_flag as allowlist_flag
from compiler.plan.model import reload_ingress_rule as reload_ingress_rule
