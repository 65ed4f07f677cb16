"""Demo teams and users: alice (Acme admin), bob (Acme member), charlie (Globex admin),
audrey (auditor of both), ops (operator). Every password is ``demo``."""

from django.contrib.auth.models import User
from django.db import transaction

from console import services
from console.models import Membership, Role, Team

PASSWORD = "demo"
USERS = {
    "alice": [("Acme", Role.ADMIN)],
    "bob": [("Acme", Role.MEMBER)],
    "charlie": [("Globex", Role.ADMIN)],
    "audrey": [("Acme", Role.AUDITOR), ("Globex", Role.AUDITOR)],
    "ops": [],
}
LOGINS = [
    ("alice", "Acme admin"),
    ("bob", "Acme member"),
    ("charlie", "Globex admin"),
    ("audrey", "auditor of Acme and Globex"),
    ("ops", "operator"),
]


@transaction.atomic
def seed(progress=None) -> dict[str, User]:
    ops = _user("ops", staff=True)
    teams = {}
    for name in ("Acme", "Globex"):
        teams[name] = Team.objects.filter(name=name).first() or services.create_team(actor=ops, name=name)
    users = {"ops": ops}
    for username, roles in USERS.items():
        if username == "ops":
            continue
        user = users[username] = _user(username)
        for team_name, role in roles:
            if not Membership.objects.filter(team=teams[team_name], user=user).exists():
                services.add_member(actor=ops, team=teams[team_name], user=user, role=role)
    return users


def _user(username: str, staff: bool = False) -> User:
    user, created = User.objects.get_or_create(
        username=username, defaults={"email": f"{username}@example.com", "is_staff": staff, "is_superuser": staff}
    )
    if created:
        user.set_password(PASSWORD)
        user.save(update_fields=["password"])
    return user
