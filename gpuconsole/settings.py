"""Settings read from the environment; defaults run on one machine with no services."""

import os
from datetime import timedelta
from pathlib import Path

import plotly
from django.core.exceptions import ImproperlyConfigured

from .env import database_from_url, envbool, envint, envlist, envrate, envroles, envstr, redis_url

BASE_DIR = Path(__file__).resolve().parent.parent
VAR_DIR = Path(envstr("GPUCONSOLE_VAR_DIR", str(BASE_DIR / "var")))

DEBUG = envbool("DEBUG", True)
_DEV_KEY = "dev-only-insecure-key-do-not-use-in-production-0123456789abcdefghij"
SECRET_KEY = envstr("SECRET_KEY", _DEV_KEY if DEBUG else "")
if not SECRET_KEY:
    raise ImproperlyConfigured("SECRET_KEY must be set when DEBUG is false")
if not DEBUG and SECRET_KEY == _DEV_KEY:
    raise ImproperlyConfigured("SECRET_KEY is the development key; set a real one")
if len(SECRET_KEY) < 32:
    raise ImproperlyConfigured("SECRET_KEY must be at least 32 characters")

ALLOWED_HOSTS = envlist("ALLOWED_HOSTS", ["127.0.0.1", "localhost", "[::1]", "testserver"])
CSRF_TRUSTED_ORIGINS = envlist("CSRF_TRUSTED_ORIGINS", ["http://127.0.0.1:8000", "http://localhost:8000"])
# How many reverse proxies in front of us append to X-Forwarded-For; 0 trusts no header.
TRUSTED_PROXY_COUNT = envint("TRUSTED_PROXY_COUNT", 0, minimum=0)

INSTALLED_APPS = [
    "daphne",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "django_filters",
    "drf_spectacular",
    "drf_spectacular_sidecar",
    "channels",
    "django_otp",
    "django_otp.plugins.otp_totp",
    "django_otp.plugins.otp_static",
    "mozilla_django_oidc",
    "gpuconsole",
    "console",
    "audit",
    "instances",
    "monitoring",
    "alerting",
    "billing",
    "scaling",
    "jobs",
    "network",
    "savings",
    "axes",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "console.edge.RefuseNulMiddleware",
    "audit.middleware.RequestContextMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django_otp.middleware.OTPMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "console.sessions.SessionLimitsMiddleware",
    "console.signin.SecondFactorMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    # Last: answers a sign-in that django-axes refused (AXES_* below).
    "axes.middleware.AxesMiddleware",
]

ROOT_URLCONF = "gpuconsole.urls"
ASGI_APPLICATION = "gpuconsole.asgi.application"
WSGI_APPLICATION = None

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
                "console.context.shell",
            ]
        },
    }
]

DATABASE_URL = envstr("DATABASE_URL", "")
if DATABASE_URL:
    DATABASES = {"default": database_from_url("DATABASE_URL", DATABASE_URL)}
else:
    VAR_DIR.mkdir(parents=True, exist_ok=True)
    DATABASES = {
        "default": {
            "ENGINE": "django.db.backends.sqlite3",
            "NAME": VAR_DIR / "db.sqlite3",
            "OPTIONS": {
                # WAL lets the ingest writer and page readers work at once.
                "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
                "transaction_mode": "IMMEDIATE",
                "timeout": 20,
            },
        }
    }
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

REDIS_URL = redis_url("REDIS_URL")
# Every Redis client's read timeout. channels-redis waits for a websocket's next message
# with a blocking pop of 5 s; a read timeout at or under that (redis-py 8 defaults to 5 s)
# cuts every idle socket with 1011. Longer than the pop, yet finite: a Redis that went
# away still surfaces as an error instead of a hang.
REDIS_SOCKET_TIMEOUT_S = envint("REDIS_SOCKET_TIMEOUT_S", 30, minimum=10)
REDIS_CLIENT = {"socket_timeout": REDIS_SOCKET_TIMEOUT_S, "socket_connect_timeout": 5, "socket_keepalive": True}
# The channel layer's connections per server process, and how long a command waits for
# one when all are busy (gpuconsole/channel_layer.py).
REDIS_MAX_CONNECTIONS = envint("REDIS_MAX_CONNECTIONS", 100, minimum=4)
REDIS_POOL_WAIT_S = envint("REDIS_POOL_WAIT_S", 20, minimum=1)
if REDIS_URL:
    CHANNEL_LAYERS = {
        "default": {
            "BACKEND": "gpuconsole.channel_layer.RedisChannelLayer",
            "CONFIG": {"hosts": [{"address": REDIS_URL, **REDIS_CLIENT}], "capacity": 5000, "expiry": 30},
        }
    }
    CACHES = {
        "default": {
            "BACKEND": "django.core.cache.backends.redis.RedisCache",
            "LOCATION": REDIS_URL,
            "OPTIONS": dict(REDIS_CLIENT),
        }
    }
    CELERY_BROKER_URL = REDIS_URL
    CELERY_BROKER_TRANSPORT_OPTIONS = dict(REDIS_CLIENT)
    CELERY_TASK_ALWAYS_EAGER = envbool("CELERY_TASK_ALWAYS_EAGER", False)
else:
    CHANNEL_LAYERS = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer", "CONFIG": {"capacity": 5000}}}
    CACHES = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}}
    CELERY_BROKER_URL = "memory://"
    CELERY_TASK_ALWAYS_EAGER = True
CELERY_TASK_EAGER_PROPAGATES = True
# Without a broker, periodic tasks run on a thread of the serving process. Either way one
# scheduler per deployment sends them: the holder of gpuconsole.schedule's lease.
INPROCESS_SCHEDULER = envbool("INPROCESS_SCHEDULER", not REDIS_URL)
CELERY_BEAT_SCHEDULER = "gpuconsole.schedule:LeasedBeatScheduler"
CELERY_TIMEZONE = "UTC"
CELERY_TASK_ACKS_LATE = True
CELERY_WORKER_PREFETCH_MULTIPLIER = 1

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {
        "NAME": "django.contrib.auth.password_validation.MinimumLengthValidator",
        "OPTIONS": {"min_length": envint("PASSWORD_MIN_LENGTH", 12, minimum=8)},
    },
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]
LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "home"
LOGOUT_REDIRECT_URL = "login"

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = False
USE_TZ = True

STATIC_URL = "/static/"
STATIC_ROOT = VAR_DIR / "static"
STATICFILES_DIRS = [
    BASE_DIR / "static",
    ("plotly", Path(plotly.__file__).parent / "package_data"),
]
SERVE_STATIC = envbool("SERVE_STATIC", True)

# Largest websocket message the server reads (the agent protocol's frame limit);
# larger ones are refused with close 4413 (gpuconsole/serving.py).
WEBSOCKET_MAX_MESSAGE_BYTES = 512 * 1024
DATA_UPLOAD_MAX_MEMORY_SIZE = envint("DATA_UPLOAD_MAX_MEMORY_SIZE", 256 * 1024, minimum=1024)

REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "console.auth.ApiTokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": [
        "rest_framework.permissions.IsAuthenticated",
        "console.api.permissions.TokenScope",
        "console.policy.Policy",
    ],
    "DEFAULT_PAGINATION_CLASS": "console.api.pagination.Pagination",
    "PAGE_SIZE": 50,
    "DEFAULT_FILTER_BACKENDS": [
        "django_filters.rest_framework.DjangoFilterBackend",
        "rest_framework.filters.OrderingFilter",
    ],
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "DEFAULT_PARSER_CLASSES": [
        "console.api.parsers.JSONParser",
        "console.api.parsers.FormParser",
        "console.api.parsers.MultiPartParser",
    ],
    "DEFAULT_THROTTLE_CLASSES": [
        "rest_framework.throttling.AnonRateThrottle",
        "rest_framework.throttling.UserRateThrottle",
    ],
    "DEFAULT_THROTTLE_RATES": {
        "anon": envrate("THROTTLE_ANON", "60/min"),
        "user": envrate("THROTTLE_USER", "1200/min"),
        "login": envrate("THROTTLE_LOGIN", "10/min"),
    },
    "EXCEPTION_HANDLER": "console.api.errors.exception_handler",
    "NUM_PROXIES": TRUSTED_PROXY_COUNT,
    "TEST_REQUEST_DEFAULT_FORMAT": "json",
}
SPECTACULAR_SETTINGS = {
    "TITLE": "GPU Console API",
    "DESCRIPTION": "Instances, GPUs, telemetry, billing and audit of a GPU cloud.",
    "VERSION": "1",
    "SERVE_INCLUDE_SCHEMA": False,
    "DEFAULT_GENERATOR_CLASS": "console.schema.OnceSchemaGenerator",
    # Swagger UI from the installed drf-spectacular-sidecar: /api/docs/ works offline.
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    "COMPONENT_SPLIT_REQUEST": True,
    "ENUM_NAME_OVERRIDES": {
        "InstanceStateEnum": "instances.models.State",
        "HostStateEnum": "instances.models.HostState",
        "AlertSeverityEnum": "alerting.models.Severity",
        "NotificationChannelKindEnum": "alerting.models.ChannelKind",
        "JobStateEnum": "jobs.models.JobState",
        "RecommendationKindEnum": "savings.models.Kind",
    },
}

EMAIL_BACKEND = envstr("EMAIL_BACKEND", "django.core.mail.backends.console.EmailBackend")
DEFAULT_FROM_EMAIL = envstr("DEFAULT_FROM_EMAIL", "gpu-console@localhost")

SESSION_COOKIE_HTTPONLY = True
CSRF_COOKIE_HTTPONLY = False
X_FRAME_OPTIONS = "DENY"
SECURE_CONTENT_TYPE_NOSNIFF = True
SECURE_REFERRER_POLICY = "same-origin"
if not DEBUG:
    SECURE_SSL_REDIRECT = envbool("SECURE_SSL_REDIRECT", True)
    SESSION_COOKIE_SECURE = True
    CSRF_COOKIE_SECURE = True
    SECURE_HSTS_SECONDS = envint("SECURE_HSTS_SECONDS", 31536000, minimum=0)
    SECURE_HSTS_INCLUDE_SUBDOMAINS = True
    SECURE_HSTS_PRELOAD = True
    if TRUSTED_PROXY_COUNT:
        SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")

# Audit: tree heads are signed with an Ed25519 private key that lives outside the
# database: PEM text in AUDIT_SIGNING_KEY, or a PEM file (created on first use if absent).
AUDIT_SIGNING_KEY = envstr("AUDIT_SIGNING_KEY", "")
AUDIT_SIGNING_KEY_FILE = envstr("AUDIT_SIGNING_KEY_FILE", str(VAR_DIR / "audit-signing-key.pem"))
AUDIT_RETENTION_DAYS = envint("AUDIT_RETENTION_DAYS", 365, minimum=180)
AUDIT_CHECKPOINT_SECONDS = envint("AUDIT_CHECKPOINT_SECONDS", 60, minimum=10)
AUDIT_CHECKPOINT_EVENTS = envint("AUDIT_CHECKPOINT_EVENTS", 1000, minimum=1)
AUDIT_ARCHIVE_DIR = envstr("AUDIT_ARCHIVE_DIR", str(VAR_DIR / "audit-archive"))
# Each sealed batch's signed tree head, appended and fsynced outside the database
# (docs/audit.md); empty: none (the newest records are then pinned only by checkpoints).
AUDIT_HEADS_FILE = envstr("AUDIT_HEADS_FILE", str(VAR_DIR / "audit-heads.jsonl"))
AUDIT_PUBLISH_IN_THREAD = envbool("AUDIT_PUBLISH_IN_THREAD", True)  # off: the committer waits for the fsync
# PostgreSQL: how long each process's sealer thread waits, once woken by a commit, before
# its look for pending records (0: each committer looks at once; docs/audit.md).
AUDIT_SEAL_DELAY_MS = envint("AUDIT_SEAL_DELAY_MS", 0, minimum=0)
# A witness's countersigned copy of the heads (python -m audit.witness), checked as well.
AUDIT_WITNESS_FILE = envstr("AUDIT_WITNESS_FILE", "")
AUDIT_VERIFY_RATE = envrate("AUDIT_VERIFY_RATE", "10/min")

# Billing: one currency per deployment.
BILLING_CURRENCY = envstr("BILLING_CURRENCY", "USD")
if not (len(BILLING_CURRENCY) == 3 and BILLING_CURRENCY.isalpha() and BILLING_CURRENCY.isupper()):
    raise ImproperlyConfigured(f"BILLING_CURRENCY={BILLING_CURRENCY!r} must be an ISO 4217 code such as USD")
BILLING_ACCOUNT_ID = envstr("BILLING_ACCOUNT_ID", "gpu-console")
BILLING_PROVIDER_NAME = envstr("BILLING_PROVIDER_NAME", "GPU Console")
# Metering a window of at least METER_WORKERS_FROM instances on PostgreSQL rates it in
# METER_WORKERS processes (docs/billing.md); 0 or 1 rates in the process itself. By
# default one fewer than the cores this process may use, leaving one to the database's
# writing, at most 8.
METER_WORKERS = envint("METER_WORKERS", min(8, len(os.sched_getaffinity(0)) - 1), minimum=0)
METER_WORKERS_FROM = envint("METER_WORKERS_FROM", 2000, minimum=0)
# The simulated spot market is for demos only (make run turns it on); production spot
# prices come from operators and `manage.py import_spot_prices`.
SPOT_MARKET_SIMULATION = envbool("SPOT_MARKET_SIMULATION", False)
# A `stopping` longer than this is flagged as stuck and no longer billed.
STOPPING_GRACE_SECONDS = envint("STOPPING_GRACE_SECONDS", 600, minimum=0)
# A `pending` (placed, not yet running) longer than this is flagged as stuck.
PENDING_GRACE_SECONDS = envint("PENDING_GRACE_SECONDS", 600, minimum=0)
# ... and one still pending after this long has failed: its GPUs are given back.
PENDING_FAIL_SECONDS = envint("PENDING_FAIL_SECONDS", 1800, minimum=60)

# Identity: API and host tokens, two-factor sign-in, sessions, single sign-on.
API_TOKEN_DEFAULT_DAYS = envint("API_TOKEN_DEFAULT_DAYS", 90, minimum=1)
API_TOKEN_MAX_DAYS = envint("API_TOKEN_MAX_DAYS", 365, minimum=1)
if API_TOKEN_MAX_DAYS < API_TOKEN_DEFAULT_DAYS:
    raise ImproperlyConfigured("API_TOKEN_MAX_DAYS must not be shorter than API_TOKEN_DEFAULT_DAYS")
HOST_TOKEN_DAYS = envint("HOST_TOKEN_DAYS", 365, minimum=1)
# After a host token is rotated, the old one keeps working this long beside the new one.
HOST_TOKEN_ROTATION_GRACE_S = envint("HOST_TOKEN_ROTATION_GRACE_S", 24 * 3600, minimum=0)
# Roles that must sign in with a second factor: operator, admin, auditor, member.
REQUIRE_2FA_ROLES = envroles("REQUIRE_2FA_ROLES", [] if DEBUG else ["operator", "admin", "auditor"])
OTP_TOTP_ISSUER = envstr("OTP_TOTP_ISSUER", "GPU Console")
RECOVERY_CODE_COUNT = 10
# A session ends after this long without a request, and this long after sign-in at most.
SESSION_IDLE_SECONDS = envint("SESSION_IDLE_SECONDS", 30 * 60, minimum=60)
SESSION_ABSOLUTE_SECONDS = envint("SESSION_ABSOLUTE_SECONDS", 12 * 3600, minimum=300)
SESSION_COOKIE_AGE = SESSION_ABSOLUTE_SECONDS
INVITE_DAYS = envint("INVITE_DAYS", 7, minimum=1)
# Single sign-on over OpenID Connect: on when OIDC_ISSUER is set.
OIDC_ISSUER = envstr("OIDC_ISSUER", "").rstrip("/")
OIDC_RP_CLIENT_ID = envstr("OIDC_CLIENT_ID", "")
OIDC_RP_CLIENT_SECRET = envstr("OIDC_CLIENT_SECRET", "")
if OIDC_ISSUER and not (OIDC_RP_CLIENT_ID and OIDC_RP_CLIENT_SECRET):
    raise ImproperlyConfigured("OIDC_ISSUER is set: set OIDC_CLIENT_ID and OIDC_CLIENT_SECRET too")
OIDC_RP_SIGN_ALGO = envstr("OIDC_SIGN_ALGO", "RS256")
OIDC_RP_SCOPES = envstr("OIDC_SCOPES", "openid email profile")
# The claim listing "<team-slug>:<role>" values; empty leaves memberships to team admins.
OIDC_TEAMS_CLAIM = envstr("OIDC_TEAMS_CLAIM", "")
OIDC_LOCAL_PASSWORDS = envbool("OIDC_LOCAL_PASSWORDS", True)
# True when the provider already asks for a second factor; else SSO is followed by ours.
OIDC_IDP_ENFORCES_MFA = envbool("OIDC_IDP_ENFORCES_MFA", False)
OIDC_PROVIDER_NAME = envstr("OIDC_PROVIDER_NAME", "single sign-on")
OIDC_TIMEOUT = envint("OIDC_TIMEOUT", 10, minimum=1)
OIDC_USE_PKCE = True
LOGIN_REDIRECT_URL_FAILURE = "/login/?sso=failed"
# django-axes first: it refuses a sign-in that is locked out before a password is checked.
AUTHENTICATION_BACKENDS = ["axes.backends.AxesStandaloneBackend", "django.contrib.auth.backends.ModelBackend", "console.sso.Backend"]
# Sign-in throttling (the page, the API token endpoint): after LOGIN_FAILURE_LIMIT failures
# for one username, or from one client address, sign-ins from it are refused with 429 for
# LOGIN_COOLOFF_MINUTES. Attempts live in the database, shared by every worker; the client
# address is the audit log's, so TRUSTED_PROXY_COUNT applies and a client header alone
# changes nothing.
AXES_HANDLER = "axes.handlers.database.AxesDatabaseHandler"
AXES_FAILURE_LIMIT = envint("LOGIN_FAILURE_LIMIT", 10, minimum=1)
AXES_COOLOFF_TIME = timedelta(minutes=envint("LOGIN_COOLOFF_MINUTES", 15, minimum=1))
AXES_LOCKOUT_PARAMETERS = ["username", "ip_address"]
AXES_CLIENT_IP_CALLABLE = "console.request_context.request_ip"
AXES_LOCKOUT_CALLABLE = "console.lockout.locked_out"
AXES_RESET_ON_SUCCESS = True
AXES_DISABLE_ACCESS_LOG = True  # the audit log records sign-ins
AXES_VERBOSE = False

# Telemetry
RAW_RETENTION_HOURS = envint("RAW_RETENTION_HOURS", 48, minimum=1)
TELEMETRY_STALE_AFTER_S = envint("TELEMETRY_STALE_AFTER_S", 15, minimum=1)
# Agent frames are stored at most once per this many milliseconds per server process
# (the first after a quiet spell at once), so frames that arrive one by one share a
# transaction; 0 writes each as soon as a writer thread is free.
INGEST_GATHER_S = envint("INGEST_GATHER_MS", 50, minimum=0) / 1000
# The same for attributing frames (reads only), which the live fan-out waits for.
INGEST_READ_GATHER_S = envint("INGEST_READ_GATHER_MS", 20, minimum=0) / 1000
# Live GPU updates go out at most once per this many milliseconds per group.
LIVE_COALESCE_S = envint("LIVE_COALESCE_MS", 250, minimum=10) / 1000
# Alerts: what a rule watches, its threshold and hold time are its own (AlertRule);
# this draws the temperature chart's threshold line.
ALERT_TEMP_C = envint("ALERT_TEMP_C", 85, minimum=1)
# Host health (docs/operations.md): a failed GPU is cordoned unless this is off; XID
# errors count for this long; a hardware clock slowdown counts once held this long.
HEALTH_AUTO_CORDON = envbool("HEALTH_AUTO_CORDON", True)
HEALTH_XID_WINDOW_S = envint("HEALTH_XID_WINDOW_S", 86_400, minimum=60)
HEALTH_THROTTLE_S = envint("HEALTH_THROTTLE_S", 300, minimum=30)
# Diagnostics bundles: kept this many days, at most this many bytes each; stored through
# STORAGES["diagnostics"] when defined, else under var/diagnostics.
DIAGNOSTICS_RETENTION_DAYS = envint("DIAGNOSTICS_RETENTION_DAYS", 30, minimum=1)
DIAGNOSTICS_MAX_BYTES = envint("DIAGNOSTICS_MAX_BYTES", 64 * 1024 * 1024, minimum=1024 * 1024)
# Notifications: webhook targets on private/loopback addresses only for these hosts
# (names, IPs or CIDRs, comma-separated); grouping and retries (alerting/notify.py).
ALERT_WEBHOOK_ALLOW_HOSTS = envlist("ALERT_WEBHOOK_ALLOW_HOSTS", [])
ALERT_GROUP_WAIT_S = envint("ALERT_GROUP_WAIT_S", 5, minimum=0)
ALERT_GROUP_INTERVAL_S = envint("ALERT_GROUP_INTERVAL_S", 300, minimum=0)
ALERT_DELIVERY_ATTEMPTS = envint("ALERT_DELIVERY_ATTEMPTS", 5, minimum=1)

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s: %(message)s"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "root": {"handlers": ["console"], "level": envstr("LOG_LEVEL", "INFO")},
    "loggers": {"django.channels.server": {"level": "WARNING"}, "daphne": {"level": "WARNING"}, "axes": {"level": "ERROR"}},
}
