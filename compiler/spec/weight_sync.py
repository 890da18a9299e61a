"""The spec's weightSync section: where the weight-sync Jobs fetch from (the store and its
credentials), when they run, what they check before a swap (``verify``) and where they
report what each tier holds."""

from __future__ import annotations

import re
from fractions import Fraction
from typing import Annotated, Literal

from pydantic import Field, model_validator

from compiler import urls
from compiler.spec.types import (
    LABEL_NAME,
    BitsPerSecond,
    Count,
    Cron,
    FreeText,
    Image,
    Millis,
    Model,
    Name,
    Quantity,
    Ratio,
    Region,
    RoleArn,
    StoreUrl,
    TierName,
    Url,
    json_pattern,
    pattern,
)


def _all_tiers() -> list[TierName]:
    return ["hot", "warm", "cold"]


class ArgoHookTrigger(Model):
    type: Literal["argocdHook"] = "argocdHook"
    hook: Literal["PreSync", "Sync", "PostSync"] = "PostSync"


class ScheduleTrigger(Model):
    type: Literal["schedule"]
    schedule: Cron


class Resources(Model):
    cpu_request: Quantity = "500m"
    memory_request: Quantity = "1Gi"
    cpu_limit: Quantity = "2"
    memory_limit: Quantity = "2Gi"


STORE_IMAGE = "docker.io/nginxinc/nginx-unprivileged:1.27-alpine"
SYNC_IMAGE = "standbyc:0.1.0"  # what the repository's Dockerfile builds (make image)


class IrsaCredentials(Model):
    type: Literal["irsa"]
    role_arn: RoleArn = Field(
        description="the IAM role the weight-sync ServiceAccount assumes (EKS IRSA: the "
        "ServiceAccount is annotated eks.amazonaws.com/role-arn; the pod identity webhook "
        "gives the pod a web identity token, which the Job exchanges with STS)"
    )


class SecretCredentials(Model):
    type: Literal["secret"]
    secret_name: Name = Field(
        description="a Secret in the namespace with AWS_ACCESS_KEY_ID and "
        "AWS_SECRET_ACCESS_KEY (and, optionally, AWS_SESSION_TOKEN), passed as env"
    )


class ProfileCredentials(Model):
    type: Literal["profile"]
    secret_name: Name = Field(
        description="a Secret in the namespace holding an AWS shared credentials file under "
        "the key `credentials` (and, optionally, a config file under `config`), mounted "
        "read-only"
    )
    profile: Annotated[str, pattern(LABEL_NAME, "profile name")] = Field(
        "default", description="the profile of that file to use"
    )


StoreCredentials = Annotated[
    IrsaCredentials | SecretCredentials | ProfileCredentials, Field(discriminator="type")
]


class WeightStore(Model):
    url: StoreUrl | None = Field(
        None,
        description="an external store: the base URL under which any static HTTP(S) server "
        "or object store serves what `standbyc weights publish` wrote, or s3://bucket/prefix "
        "for a private bucket (requests signed with `credentials`). Default: the "
        "in-cluster store standbyc emits (http://<name>-weight-store.<namespace>.svc:8080/)",
    )
    endpoint: Url | None = Field(
        None, description="s3:// store: an S3-compatible server (default: AWS's own)"
    )
    region: Region | None = Field(None, description="s3:// store: the bucket's region")
    credentials: StoreCredentials | None = Field(
        None,
        description="s3:// store: how the Job gets credentials (irsa, a Secret of keys, or a "
        "profile file from a Secret); none: whatever the node provides (instance role)",
    )
    claim_name: Name | None = Field(
        None,
        description="in-cluster store: the PVC (ReadWriteMany) the publisher writes the "
        "store into and the store server reads; default <name>-weight-store",
    )
    image: Image = Field(STORE_IMAGE, description="in-cluster store: a static file server")

    @model_validator(mode="after")
    def _s3_fields(self) -> WeightStore:
        if not (self.url and urls.is_s3(self.url)):
            for name in ("endpoint", "region", "credentials"):
                if getattr(self, name) is not None:
                    raise ValueError(f"{name}: only for an s3:// url")
        return self


class WeightReport(Model):
    pushgateway: Url | None = Field(
        "http://prometheus-pushgateway.monitoring.svc:9091",
        description="Pushgateway the weight-sync Jobs push standbyc_weights_generation to; "
        "null: no report, and no alerts on it",
    )
    schedule: Cron | None = Field(
        "*/10 * * * *",
        description="when the weight-report CronJob pushes again what each tier holds, so "
        "that a Pushgateway restart (without persistence it forgets every push) does not "
        "leave the weight alerts blind until the next sync; keep it more frequent than "
        "alerts.weightsUnreported.for. null: no CronJob",
    )


_CONFIG_KEY = re.compile(r"^[A-Za-z0-9][-._A-Za-z0-9]{0,252}$")
ConfigKey = Annotated[
    str, pattern(_CONFIG_KEY, "Secret or ConfigMap key"), json_pattern(_CONFIG_KEY.pattern)
]
Identity = Annotated[FreeText, Field(min_length=1)]


class TrustFile(Model):
    """A file from a Secret or a ConfigMap of the namespace, mounted read-only into the
    weight-sync Jobs."""

    secret_name: Name | None = None
    config_map_name: Name | None = None
    key: ConfigKey = Field(description="the key that holds the file")

    @model_validator(mode="after")
    def _one_source(self) -> TrustFile:
        if (self.secret_name is None) == (self.config_map_name is None):
            raise ValueError("give exactly one of secretName and configMapName")
        return self


class KeyVerify(Model):
    type: Literal["key"]
    public_key: TrustFile = Field(description="the PEM public key (EC P-256, P-384, P-521)")

    @property
    def trust_file(self) -> TrustFile:  # each kind of verify: the file its Jobs mount
        return self.public_key


class CertificateVerify(Model):
    type: Literal["certificate"]
    certificate_chain: TrustFile = Field(
        description="PEM certificates the signing certificate must chain to (your root, "
        "and intermediates)"
    )
    identity: Identity = Field(
        description="what the signing certificate must carry: a subject alternative name "
        "(email, URI, DNS name), or its common name when it has none"
    )

    @property
    def trust_file(self) -> TrustFile:
        return self.certificate_chain


class SigstoreVerify(Model):
    type: Literal["sigstore"]
    identity: Identity = Field(description="the signer's identity in its Fulcio certificate")
    issuer: Url = Field(description="the OIDC issuer that vouched for it")
    trust_root: TrustFile = Field(
        description="a Sigstore ClientTrustConfig JSON (its trusted root): the Job "
        "verifies offline, without TUF"
    )

    @property
    def trust_file(self) -> TrustFile:
        return self.trust_root


Verify = Annotated[KeyVerify | CertificateVerify | SigstoreVerify, Field(discriminator="type")]


class WeightSync(Model):
    image: Image = Field(SYNC_IMAGE, description="an image with standbyc (see Dockerfile)")
    store: WeightStore = Field(default_factory=WeightStore)
    trigger: Annotated[ArgoHookTrigger | ScheduleTrigger, Field(discriminator="type")] = Field(
        default_factory=ArgoHookTrigger
    )
    tiers: list[TierName] = Field(default_factory=_all_tiers, min_length=1)
    bandwidth_share: Ratio = Field(
        Fraction(1, 2), description="share of a tier's egress that weight sync may use"
    )
    expected_delta: Ratio = Field(
        Fraction(2, 100), description="expected delta size as a share of the model, for the plan"
    )
    claim_name: Name | None = Field(
        None,
        description="PVC (ReadWriteMany) holding one checkpoint directory per tier, "
        "<tier>/<model.name>; default <name>-weights",
    )
    claim_read_rate: BitsPerSecond = Field(
        500 * 2**20 * 8,
        description="what one client reads from the weights claim per second: every engine "
        "load reads the whole model from it. A ReadWriteMany claim shared by nodes is a "
        "network file system (EFS: 500MiB/s per client); the default is that",
    )
    allow_rollback: bool = Field(
        False,
        description="let the Jobs bring a tier back to model.generation when it holds a later "
        "one (a deliberate rollback: lower model.generation and set this). Without it a Job "
        "of an older generation, retried late, leaves a tier that moved on as it is",
    )
    backoff_limit: Count = 3
    active_deadline: Millis | None = Field(
        None,
        description="each weight-sync Job's activeDeadlineSeconds. Default: 30m, or more for "
        "a tier whose engines reload, so that its whole reload fits at worst (every wave, "
        "every step taking reload.timeout); set lower than that, compile refuses",
    )
    ttl_after_finished: Millis | None = Field(
        "7d",  # read as any spec value is (validate_default)
        validate_default=True,
        description="delete finished Jobs (and their pods' logs) after this long: one Job "
        "per tier and generation is left behind otherwise, and Argo CD never prunes a "
        "hook. A deleted failed Job no longer raises WeightSyncJobFailed; a tier it left "
        "behind still raises StandbyWeightsBehind. null: keep them (prune them yourself)",
    )
    resources: Resources = Field(default_factory=Resources)
    report: WeightReport = Field(default_factory=WeightReport)
    verify: Verify | None = Field(
        None,
        description="swap in only generations their publisher signed (OpenSSF Model "
        "Signing, `standbyc weights publish --sign-key`), verified by the Job before the "
        "swap: with a public key, a certificate chain and identity, or a Sigstore identity. "
        "None: any writer of the store decides what is served",
    )
