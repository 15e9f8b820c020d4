"""Holds the client to the contract, openapi.yaml at the repository's root: every operation is
reachable through the client (sync and async) with its method and path, every field its JSON
request bodies take is known, and the records carry every field the answers require."""

from __future__ import annotations

import ast
import dataclasses
from pathlib import Path
from typing import Any

import pytest
import yaml

import sandgate
from sandgate import _ops

import os

ROOT = Path(__file__).resolve().parents[3]
# SANDGATE_TEST_OPENAPI holds the client to another contract (a branch's, before it merges).
OPENAPI = Path(os.environ.get("SANDGATE_TEST_OPENAPI") or ROOT / "openapi.yaml")
SRC = Path(sandgate.__file__).resolve().parent
METHODS = ("get", "put", "post", "patch", "delete")


@pytest.fixture(scope="module")
def spec() -> dict[str, Any]:
    return yaml.safe_load(OPENAPI.read_text())


def operations(spec: dict[str, Any]) -> dict[str, tuple[str, str, dict[str, Any]]]:
    ops = {}
    for path, item in spec["paths"].items():
        for m in METHODS:
            if m in item:
                ops[item[m]["operationId"]] = (m.upper(), path, item[m])
    return ops


def resolve(spec: dict[str, Any], schema: dict[str, Any]) -> dict[str, Any]:
    while "$ref" in schema:
        node: Any = spec
        for part in schema["$ref"].removeprefix("#/").split("/"):
            node = node[part]
        schema = node
    return schema


def body_fields(spec: dict[str, Any], op: dict[str, Any]) -> tuple[set[str], set[str]]:
    """The properties and required properties of an operation's JSON body."""
    content = op.get("requestBody", {}).get("content", {})
    if "application/json" not in content:
        return set(), set()
    s = resolve(spec, content["application/json"]["schema"])
    props, required = set(s.get("properties", {})), set(s.get("required", []))
    for alt in s.get("oneOf", []) + s.get("allOf", []):
        a = resolve(spec, alt)
        props |= set(a.get("properties", {}))
    return props, required


def test_every_operation_is_known_with_its_method_and_path(spec: dict[str, Any]) -> None:
    ops = operations(spec)
    missing = sorted(set(ops) - set(_ops.OPERATIONS))
    assert not missing, f"operations of openapi.yaml the client does not know: {missing}"
    for op_id, (method, path, _) in ops.items():
        assert _ops.OPERATIONS[op_id][:2] == (method, path), op_id
    extra = sorted(set(_ops.OPERATIONS) - set(ops) - _ops.OPTIONAL_OPERATIONS)
    assert not extra, f"operations the client calls that openapi.yaml lacks: {extra}"


def test_every_body_field_is_known(spec: dict[str, Any]) -> None:
    for op_id, (_, _, op) in operations(spec).items():
        props, required = body_fields(spec, op)
        known = set(_ops.OPERATIONS[op_id][2])
        assert required <= known, f"{op_id}: required body fields the client cannot send: {sorted(required - known)}"
        assert props <= known, f"{op_id}: body fields the client does not know: {sorted(props - known)}"


def query_params(spec: dict[str, Any], path: str, op: dict[str, Any]) -> set[str]:
    params = spec["paths"][path].get("parameters", []) + op.get("parameters", [])
    return {resolve(spec, p)["name"] for p in params if resolve(spec, p)["in"] == "query"}


def test_every_query_parameter_sent_is_declared(spec: dict[str, Any]) -> None:
    for op_id, (_, path, op) in operations(spec).items():
        sent = {(op_id, q) for q in _ops.QUERY.get(op_id, ())}
        undeclared = sorted(q for o, q in sent - _ops.OPTIONAL_QUERY if q not in query_params(spec, path, op))
        assert not undeclared, f"{op_id}: the client sends query parameters the contract does not declare: {undeclared}"


def string_constants(path: Path) -> set[str]:
    return {n.value for n in ast.walk(ast.parse(path.read_text())) if isinstance(n, ast.Constant) and isinstance(n.value, str)}


@pytest.mark.parametrize("module", ["_async_client.py", "_sync_client.py"])
def test_every_operation_is_reachable(spec: dict[str, Any], module: str) -> None:
    """Each operation id is requested by some method of the client (request_for(op, …))."""
    used = string_constants(SRC / module)
    unreached = sorted(op for op in operations(spec) if op not in used)
    assert not unreached, f"operations no method of {module} calls: {unreached}"


def test_sync_and_async_have_the_same_methods() -> None:
    pairs = [
        (sandgate.Gateway, sandgate.AsyncGateway),
        (sandgate.Sandbox, sandgate.AsyncSandbox),
        (sandgate.Commands, sandgate.AsyncCommands),
        (sandgate.Files, sandgate.AsyncFiles),
        (sandgate.Ports, sandgate.AsyncPorts),
        (sandgate.Task, sandgate.AsyncTask),
    ]
    for sync, asy in pairs:
        names = {n for n in dir(sync) if not n.startswith("_")} - {"close"}
        anames = {n for n in dir(asy) if not n.startswith("_")} - {"aclose", "close"}
        assert names == anames, (sync, names ^ anames)


@pytest.mark.parametrize(
    "record,schema",
    [
        (sandgate.Session, "Session"),
        (sandgate.TaskInfo, "Task"),
        (sandgate.ExecutionResult, "ExecutionResult"),
        (sandgate.RichResult, "RichResult"),
        (sandgate.ProcessInfo, "Process"),
        (sandgate.FileEntry, "FileEntry"),
        (sandgate.FileWritten, "FileWritten"),
        (sandgate.Snapshot, "Snapshot"),
        (sandgate.Context, "Context"),
        (sandgate.PortLink, "PortLink"),
    ],
)
def test_records_carry_the_required_fields(spec: dict[str, Any], record: type, schema: str) -> None:
    s = spec["components"]["schemas"][schema]
    fields = {f.name for f in dataclasses.fields(record)}
    missing = sorted(set(s.get("required", [])) - fields)
    assert not missing, f"{record.__name__} lacks required fields of {schema}: {missing}"


def test_problem_types_map_to_typed_errors() -> None:
    """Every fault kind of internal/fault and the edge's own kinds have an error class."""
    fault = (ROOT / "internal" / "fault" / "fault.go").read_text()
    import re

    kinds = set(re.findall(r'Kind = "([a-z-]+)"', fault)) | {"unauthenticated", "method-not-allowed", "unsupported-media-type", "range-not-satisfiable"}
    from sandgate._errors import KIND_ERRORS

    assert kinds <= set(KIND_ERRORS), sorted(kinds - set(KIND_ERRORS))
    e = sandgate._errors.problem_error({"type": "https://sandgate.dev/problems/quota", "title": "Quota exceeded", "status": 429, "detail": "d"}, 429, 2.0)
    assert isinstance(e, sandgate.QuotaError) and isinstance(e, sandgate.RateLimitedError)
    assert (e.type, e.kind, e.status, e.title, e.detail, e.retry_after) == ("https://sandgate.dev/problems/quota", "quota", 429, "Quota exceeded", "d", 2.0)
    assert isinstance(sandgate._errors.problem_error({"type": "https://sandgate.dev/problems/paused", "status": 409}, 409), sandgate.ConflictError)
    assert isinstance(sandgate._errors.problem_error({"type": "about:blank", "status": 404}, 404), sandgate.NotFoundError)
