"""What every Kafka client of the replicator shares: its settings, its error watch, access checks.

librdkafka reports a broker that refuses a client (wrong SASL password, an untrusted
certificate) only through error callbacks and log lines, and then retries forever while every
request times out as if the broker were down. Every client built here therefore carries a
``BrokerWatch`` as its ``error_cb``: it keeps the first such refusal, and the code that polls
the client raises it as a ``KafkaAccessError``, which is terminal. ``check_access`` makes one
quick metadata request first, so a component that starts with bad credentials stops within a
second or two with a one-line message naming the broker, instead of retrying.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Mapping
from typing import Any

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient

from thl_topics.errors import KafkaAccessError, KafkaSettingsError, ThlUnavailable

log = logging.getLogger(__name__)

#: librdkafka's own log lines (connection failures, retries) go through Python logging, so
#: programs decide where they go, instead of raw lines on stderr.
LIBRDKAFKA_LOG = logging.getLogger("librdkafka")

#: Longest pause between connection attempts of ``check_access``'s client.
_PROBE_BACKOFF_MS = 1000
#: The first pause before a reconnection of the clients a session asks at once (librdkafka's
#: default: 100 ms; see ``quick_first_answer``).
FIRST_BACKOFF_MS = 20

#: Setting names whose values are secrets (librdkafka's own sensitive properties).
_SECRET_WORDS = ("password", "secret")
_SECRET_NAMES = frozenset({"ssl.key.pem", "ssl_key", "sasl.oauthbearer.config",
                           "ssl.keystore.location.password"})

#: Refusals of the login itself.
_AUTH_CODES = frozenset({
    KafkaError._AUTHENTICATION,
    KafkaError.SASL_AUTHENTICATION_FAILED,
    KafkaError.UNSUPPORTED_SASL_MECHANISM,
    KafkaError.ILLEGAL_SASL_STATE,
})

#: Refusals of an authenticated client: permissions (ACLs).
_DENIED_CODES = frozenset({
    KafkaError.TOPIC_AUTHORIZATION_FAILED,
    KafkaError.GROUP_AUTHORIZATION_FAILED,
    KafkaError.CLUSTER_AUTHORIZATION_FAILED,
    KafkaError.TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
})

#: librdkafka prefixes broker errors with the broker: ``sasl_ssl://host:9094/1: reason``.
_BROKER_PREFIX = re.compile(r"^(?:\w+)://(?P<broker>[^/\s]+)/\S+: (?P<reason>.*)$", re.S)


def is_secret_setting(name: str) -> bool:
    """True for librdkafka settings whose values must never be shown."""
    lowered = name.lower()
    return lowered in _SECRET_NAMES or any(word in lowered for word in _SECRET_WORDS)


class ClientSettings(dict[str, Any]):
    """librdkafka settings of one client: a plain dict whose ``repr`` hides secrets.

    Passwords must reach librdkafka in clear, so they sit in this dict; anything that logs
    or formats it (a dataclass repr, a traceback) shows ``'**********'`` instead.
    """

    def __repr__(self) -> str:
        shown = {k: ("**********" if is_secret_setting(k) else v) for k, v in self.items()}
        return f"ClientSettings({shown!r})"

    __str__ = __repr__

    @property
    def bootstrap(self) -> str:
        """The bootstrap servers, for messages."""
        return str(self.get("bootstrap.servers", "?"))


def client_settings(kafka: str | Mapping[str, Any]) -> ClientSettings:
    """librdkafka settings from bootstrap servers or from a settings mapping (copied)."""
    return ClientSettings({"bootstrap.servers": kafka} if isinstance(kafka, str) else kafka)


def quick_first_answer(settings: ClientSettings) -> ClientSettings:
    """``settings`` for a client asked a question as soon as it is made (a session's THL
    reader and feed): a first reconnection pause of ``FIRST_BACKOFF_MS`` unless the
    configuration sets one.

    A new client's first metadata answer replaces the bootstrap broker with the one it
    names, which librdkafka connects to only after half of ``reconnect.backoff.ms``: the
    reader's first topic look-up of a group session waited 41-54 ms for it (of the ~110 ms
    from ``trepctl online`` to the first block), 5 ms (median; 14 at most) with 20 ms, and
    no first offsets query or fetch stalled behind it in 400 openings. Later pauses still
    double up to ``reconnect.backoff.max.ms`` (10 s) while a broker is away."""
    settings.setdefault("reconnect.backoff.ms", FIRST_BACKOFF_MS)
    return settings


def is_access_error(err: KafkaError) -> bool:
    """True when the broker refused this client: credentials, certificate or permission.

    A TLS failure counts only when it is about certificates: a broker that goes away in
    the middle of a handshake is also reported as an SSL error, and that one passes.
    """
    if err.code() in _AUTH_CODES or err.code() in _DENIED_CODES:
        return True
    return err.code() == KafkaError._SSL and "certificate" in err.str().lower()


def _hint(err: KafkaError) -> str:
    """What the operator can check, in the configuration's own field names."""
    code = err.code()
    if code == KafkaError._SSL:
        if "certificate required" in err.str().lower() or "alert" in err.str().lower():
            return ("check kafka.tls.certificate_location and kafka.tls.key_location "
                    "(a certificate the broker's CA signed)")
        return ("check kafka.tls.ca_location: it must hold the CA that signed the "
                "broker's certificate")
    if code in (KafkaError.UNSUPPORTED_SASL_MECHANISM, KafkaError.ILLEGAL_SASL_STATE):
        return "check kafka.sasl.mechanism against the broker's sasl.enabled.mechanisms"
    if code in (KafkaError._AUTHENTICATION, KafkaError.SASL_AUTHENTICATION_FAILED):
        return ("check kafka.sasl.username and the password (kafka.sasl.password, "
                "kafka.sasl.password_file or TREP_KAFKA__SASL__PASSWORD)")
    return "grant this user the access it needs (ACLs on the THL topic, group and " \
           "transactional id)"


def access_error(settings: Mapping[str, Any], err: KafkaError) -> KafkaAccessError:
    """The one-line, terminal error for a broker that refused this client."""
    text = err.str().strip().replace("\n", " ")
    match = _BROKER_PREFIX.match(text)
    broker = match.group("broker") if match else str(settings.get("bootstrap.servers", "?"))
    reason = match.group("reason") if match else text
    protocol = str(settings.get("security.protocol", "PLAINTEXT")).upper()
    who = ""
    if "sasl.username" in settings and err.code() != KafkaError._SSL:
        who = (f" as user {settings['sasl.username']!r} "
               f"({settings.get('sasl.mechanism', settings.get('sasl.mechanisms', '?'))})")
    kind = ("TLS failed" if err.code() == KafkaError._SSL else
            "denied access" if err.code() in _DENIED_CODES else "refused authentication")
    return KafkaAccessError(f"Kafka broker {broker} ({protocol}) {kind}{who}: {reason}; "
                            f"{_hint(err)}", broker=broker)


class BrokerWatch:
    """The ``error_cb`` of one client: keeps the first refusal, logs the rest quietly.

    librdkafka calls it from ``poll()`` (or ``flush``/``consume``); the owner calls
    ``check()`` afterwards to turn a refusal into a ``KafkaAccessError``.
    """

    def __init__(self, settings: Mapping[str, Any]) -> None:
        #: The client's settings, for messages (secrets are never put in a message).
        self.settings = settings
        self.failure: KafkaAccessError | None = None
        #: The last error reported, refusal or not (for "does not answer" messages).
        self.last: KafkaError | None = None

    def __call__(self, err: KafkaError) -> None:
        self.last = err
        if is_access_error(err):
            if self.failure is None:
                self.failure = access_error(self.settings, err)
            return
        log.debug("Kafka client of %s: %s", self.settings.get("bootstrap.servers"), err.str())

    def check(self) -> None:
        """Raise the refusal seen so far, if any."""
        if self.failure is not None:
            raise self.failure


def watched(kafka: str | Mapping[str, Any]) -> tuple[ClientSettings, BrokerWatch]:
    """Client settings with a fresh ``BrokerWatch`` as ``error_cb``, and that watch."""
    settings = client_settings(kafka)
    watch = BrokerWatch(ClientSettings(settings))
    settings["error_cb"] = watch
    settings.setdefault("logger", LIBRDKAFKA_LOG)
    return settings, watch


def new_admin(kafka: str | Mapping[str, Any]) -> tuple[AdminClient, BrokerWatch]:
    """An admin client with its watch (``KafkaSettingsError`` if librdkafka refuses the
    settings)."""
    settings, watch = watched(kafka)
    try:
        return AdminClient(settings), watch
    except KafkaException as exc:
        raise settings_error(settings, exc) from exc


def settings_error(settings: ClientSettings, exc: KafkaException) -> KafkaSettingsError:
    """librdkafka refused a setting when the client was built (unknown property, bad file)."""
    err = exc.args[0] if exc.args else None
    reason = err.str() if isinstance(err, KafkaError) else str(exc)
    hint = "check the kafka section of the configuration"
    for needle, fields in (("ssl.key", "kafka.tls.key_location and kafka.tls.key_password"),
                           ("ssl.certificate", "kafka.tls.certificate_location"),
                           ("ssl.ca", "kafka.tls.ca_location"),
                           ("configuration property", "kafka.properties")):
        if needle in reason:
            hint = f"check {fields}"
            break
    return KafkaSettingsError(f"Kafka client settings for {settings.bootstrap} are invalid: "
                              f"{reason}; {hint}")


def check_access(kafka: str | Mapping[str, Any], timeout: float = 15.0) -> int:
    """Connect, authenticate and ask for the cluster's brokers; their number.

    Raises ``KafkaAccessError`` (terminal) as soon as the broker refuses the credentials or
    the certificate, ``ThlUnavailable`` naming the bootstrap servers if no broker answers
    within ``timeout`` seconds, ``KafkaSettingsError`` if librdkafka refuses the settings.
    """
    probe = client_settings(kafka)
    # A throwaway client: reconnect at least every second. With librdkafka's default
    # backoff (doubling up to 10 s) a broker back from an outage could go unnoticed for
    # most of the window, and the caller would wait for another whole attempt.
    backoff = int(probe.get("reconnect.backoff.max.ms", _PROBE_BACKOFF_MS))
    probe["reconnect.backoff.max.ms"] = min(backoff, _PROBE_BACKOFF_MS)
    # Its first metadata answer replaces the bootstrap broker with the one it names, which
    # librdkafka connects to only after half of reconnect.backoff.ms: 45-65 ms of each
    # check with the default 100 ms, about 25 with 20 (a check at every group session start).
    probe["reconnect.backoff.ms"] = min(int(probe.get("reconnect.backoff.ms", 100)),
                                        FIRST_BACKOFF_MS, probe["reconnect.backoff.max.ms"])
    admin, watch = new_admin(probe)
    settings = watch.settings
    deadline = time.monotonic() + timeout
    last: KafkaError | None = None
    while True:
        # Short requests, serving the error callbacks in between: a refused login shows up
        # there within one connection attempt (~0.3 s), long before a request would time
        # out. librdkafka sends describe_cluster as a brokers-only metadata request, where
        # list_topics() asked for every topic of the cluster (7.5 ms of the stack's broker
        # and a ~100 KB answer with 300 topics; far more on a production cluster).
        step = max(0.05, min(0.5, deadline - time.monotonic()))
        try:
            cluster = admin.describe_cluster(request_timeout=step).result()
            return len(cluster.nodes)
        except KafkaException as exc:
            last = exc.args[0] if exc.args else None
        admin.poll(0)
        watch.check()
        if time.monotonic() >= deadline:
            break
    cause = watch.last or last
    reason = cause.str() if cause is not None else "no answer"
    raise ThlUnavailable(
        f"Kafka at {settings.get('bootstrap.servers')} "
        f"({str(settings.get('security.protocol', 'PLAINTEXT')).upper()}) does not answer "
        f"within {timeout:.0f} s: {reason}; check that the brokers are up and that "
        "kafka.bootstrap_servers and kafka.security_protocol match their listener")
