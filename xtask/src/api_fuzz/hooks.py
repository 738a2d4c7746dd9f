"""schemathesis hooks for `cargo xtask api-fuzz` (loaded through SCHEMATHESIS_HOOKS).

A generated submit's idempotency key is made to name its payload: the key as generated, then
`-` and a digest of the rest of the body. Hypothesis reuses a drawn key across many cases while it
varies the other fields, and the server rightly answers each later one 409
`idempotency_conflict`, so most generated tasks were conflicts rather than tasks. With the key
naming its payload, a different payload never claims a key already taken, and the same payload
sent again still finds its task (200). Only a key the document admits is changed, and it stays
one (printable ASCII, no surrounding space, at most 255 characters); everything else is sent as
generated. The hook runs where schemathesis draws bodies (the fuzzing and stateful phases); the
coverage phase's bound values keep their keys, and still meet the 409s.

A new tenant's name is unique the same way: Hypothesis draws few names, and every tenant after the
first of a name rightly answers 409 `tenant_exists`, so that most generated creates were refused
(schemathesis then warned of a schema that does not match the API). A name the document admits
gets `-` and a digest of the rest of the body, within its 63 characters.
"""

import hashlib
import json
import re

import schemathesis

SUBMITS = {("POST", "/tasks"), ("POST", "/tasks/batch")}
# Room for "-" and 16 hex digits under the key's 255 characters.
KEEP = 255 - 17
TENANT_NAME = re.compile(r"^[a-z0-9][a-z0-9_-]{0,62}$")
# Room for "-" and 16 hex digits under a tenant name's 63 characters.
KEEP_NAME = 63 - 17


def _admitted_key(key):
    return (
        isinstance(key, str)
        and 1 <= len(key) <= 255
        and all(" " <= c <= "~" for c in key)
        and key[0] != " "
        and key[-1] != " "
    )


def _name_its_payload(task):
    if not isinstance(task, dict) or not _admitted_key(task.get("idempotency_key")):
        return task
    rest = {k: v for k, v in task.items() if k != "idempotency_key"}
    digest = hashlib.sha256(json.dumps(rest, sort_keys=True, default=str).encode()).hexdigest()
    task = dict(task)
    task["idempotency_key"] = f"{task['idempotency_key'][:KEEP]}-{digest[:16]}"
    return task


def _digest(rest):
    return hashlib.sha256(json.dumps(rest, sort_keys=True, default=str).encode()).hexdigest()


def _unique_tenant(body):
    name = body.get("name") if isinstance(body, dict) else None
    if not isinstance(name, str) or not TENANT_NAME.match(name):
        return body
    rest = {k: v for k, v in body.items() if k != "name"}
    body = dict(body)
    body["name"] = f"{name[:KEEP_NAME]}-{_digest(rest)[:16]}"
    return body


@schemathesis.hook
def map_body(context, body):
    operation = context.operation
    if operation is not None and (operation.method.upper(), operation.path) == ("POST", "/tenants"):
        return _unique_tenant(body)
    if operation is None or (operation.method.upper(), operation.path) not in SUBMITS:
        return body
    if operation.path == "/tasks":
        return _name_its_payload(body)
    if isinstance(body, dict) and isinstance(body.get("tasks"), list):
        body = dict(body)
        body["tasks"] = [_name_its_payload(task) for task in body["tasks"]]
    return body
