"""A real OpenID Connect provider (django-oidc-provider) that the SSO tests run on a
port of their own. Configured by environment variables set by serve.py's caller."""

import os
from pathlib import Path

SECRET_KEY = "identity-provider-for-tests-only-0123456789abcdef"
DEBUG = False
ALLOWED_HOSTS = ["127.0.0.1", "localhost"]
INSTALLED_APPS = [
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "oidc_provider",
]
MIDDLEWARE = [
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
]
ROOT_URLCONF = "idp.urls"
TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [Path(__file__).parent / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ]
        },
    }
]
DATABASES = {"default": {"ENGINE": "django.db.backends.sqlite3", "NAME": os.environ["IDP_DB"]}}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
USE_TZ = True
PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]
LOGIN_URL = "/accounts/login/"
SITE_URL = ""  # set by serve.py once the port is known
OIDC_USERINFO = "idp.claims.userinfo"
OIDC_EXTRA_SCOPE_CLAIMS = "idp.claims.GroupsScope"
OIDC_IDTOKEN_INCLUDE_CLAIMS = False
LOGGING = {"version": 1, "disable_existing_loggers": True, "root": {"level": "ERROR"}}
