"""The agent's configuration: KubeletConfiguration (kubelet.config.k8s.io/v1beta1), the subset nodeagent supports.

`load_config(path)` is the way in; see `kubelet_config` for the fields, their defaults and the project extensions.
"""

from nodeagent.config.durations import format_go_duration, parse_go_duration
from nodeagent.config.errors import ConfigError, DurationError, QuantityError
from nodeagent.config.kubelet_config import (
    API_VERSION,
    KIND,
    AnonymousAuthentication,
    AuthorizationMode,
    CgroupDriver,
    HairpinMode,
    KubeletAuthentication,
    KubeletAuthorization,
    KubeletConfiguration,
    PLEGMode,
    ShutdownGracePeriodByPodPriority,
    Taint,
    TaintEffect,
    WebhookAuthentication,
    WebhookAuthorization,
    X509Authentication,
    defaults,
)
from nodeagent.config.loading import MAX_CONFIG_BYTES, LoadedConfig, load_config, parse_config
from nodeagent.config.quantity import parse_percentage, parse_quantity
from nodeagent.config.schema import decode_document, encode_document
from nodeagent.config.validation import EVICTION_SIGNALS, validate

__all__ = [
    "API_VERSION",
    "EVICTION_SIGNALS",
    "KIND",
    "MAX_CONFIG_BYTES",
    "AnonymousAuthentication",
    "AuthorizationMode",
    "CgroupDriver",
    "ConfigError",
    "DurationError",
    "HairpinMode",
    "KubeletAuthentication",
    "KubeletAuthorization",
    "KubeletConfiguration",
    "LoadedConfig",
    "PLEGMode",
    "QuantityError",
    "ShutdownGracePeriodByPodPriority",
    "Taint",
    "TaintEffect",
    "WebhookAuthentication",
    "WebhookAuthorization",
    "X509Authentication",
    "decode_document",
    "defaults",
    "encode_document",
    "format_go_duration",
    "load_config",
    "parse_config",
    "parse_go_duration",
    "parse_percentage",
    "parse_quantity",
    "validate",
]
