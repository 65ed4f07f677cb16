"""What the provider says about its users: email, whether it is verified, and groups
(from the IDP_USERS description the tests pass in)."""

import json
import os

from oidc_provider.lib.claims import ScopeClaims


def _described(user) -> dict:
    return next((u for u in json.loads(os.environ["IDP_USERS"]) if u["username"] == user.username), {})


def userinfo(claims, user):
    claims["email"] = user.email
    claims["email_verified"] = _described(user).get("verified", True)
    claims["preferred_username"] = user.username
    return claims


class GroupsScope(ScopeClaims):
    info_groups = ("Groups", "The teams and roles you hold.")

    def scope_groups(self):
        return {"groups": _described(self.user).get("groups", [])}
