"""A tiny in-memory server speaking the parts of the Hugging Face Hub protocol that the real
``huggingface_hub`` client uses to push a folder and download a snapshot, on loopback.

Endpoints (``{repo}`` is ``owner/name``, ``{rev}`` a branch or a commit sha, URL-quoted):

=======  =====================================================  =============================================
POST     /api/repos/create                                       create a repo (initial commit: .gitattributes);
                                                                 409 (with the url) if it exists
POST     /api/validate-yaml                                      README metadata check (YAML must parse)
POST     /api/models/{repo}/branch/{branch}                      create a branch at main's head; 409 if it exists
POST     /api/models/{repo}/preupload/{rev}                      uploadMode "regular" for every file, the remote
                                                                 blob oid when the path exists (no-op detection)
POST     /api/models/{repo}/commit/{rev}                         NDJSON: header, file (base64), deletedFile;
                                                                 lfsFile is refused (no LFS/Xet storage here)
GET      /api/models/{repo}[/revision/{rev}]                     repo info: id, sha, siblings
GET      /api/models/{repo}/tree/{rev}[/{path}]                  file listing: type, path, size, oid
HEAD/GET /{repo}/resolve/{rev}/{path}                            file bytes with X-Repo-Commit, ETag (git blob
                                                                 sha1), Content-Length; Range supported
=======  =====================================================  =============================================

Errors carry the ``X-Error-Code`` header the client maps to its exceptions (``RepoNotFound``,
``RevisionNotFound``, ``EntryNotFound``). Every request is recorded in ``FakeHub.calls`` as
``(method, route)``, and its ``Authorization`` header in ``FakeHub.authorization``.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import re
import sys
import threading
from collections.abc import Callable
from datetime import datetime, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, unquote, urlsplit

REPO = r"(?P<repo>[^/]+/[^/]+)"
GITATTRIBUTES = b"*.safetensors filter=lfs diff=lfs merge=lfs -text\n"


def git_blob_oid(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def run_client(main: Callable[[FakeHub, dict], dict]) -> None:
    """The ``__main__`` of a client module run in a subprocess (``python -m tests.hub.<client> PLAN.json``):
    start a FakeHub and point HF_ENDPOINT at it before ``main`` imports huggingface_hub (which reads its
    settings at import), run ``main(hub, plan)``, and print its results with the requests the server could not
    handle (``unhandled``) as one JSON line."""
    with open(sys.argv[1]) as f:
        plan = json.load(f)
    hub = FakeHub().start()
    os.environ["HF_ENDPOINT"] = hub.url
    try:
        out = main(hub, plan)
        out["unhandled"] = [c for c in hub.calls if c[1].startswith("UNHANDLED")]
    finally:
        hub.stop()
    print(json.dumps(out))


class HubError(Exception):
    def __init__(self, status: int, message: str, code: str | None = None, **extra):
        super().__init__(message)
        self.status, self.message, self.code, self.extra = status, message, code, extra


class FakeHub:
    """Repos in memory: ``repos[id] = {"branches": {name: sha}, "commits": {sha: {path: bytes}}}``."""

    def __init__(self) -> None:
        self.repos: dict[str, dict] = {}
        self.calls: list[tuple[str, str]] = []
        self.authorization: list[str | None] = []  # the Authorization header of every request, in order
        self.received: list[bytes] = []  # the body of every request, in order (what reached the server)
        self.lock = threading.Lock()
        self.server: ThreadingHTTPServer | None = None
        self.thread: threading.Thread | None = None

    # -------------------------------------------------------------------------------- lifecycle
    def start(self) -> FakeHub:
        hub = self

        class Handler(_Handler):
            pass

        Handler.hub = hub
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.thread = threading.Thread(target=self.server.serve_forever, name="fake-hub", daemon=True)
        self.thread.start()
        return self

    def stop(self) -> None:
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()
            self.thread.join(timeout=5)
            self.server = None

    @property
    def url(self) -> str:
        host, port = self.server.server_address[:2]
        return f"http://{host}:{port}"

    # -------------------------------------------------------------------------------- git-ish model
    def _repo(self, repo_id: str) -> dict:
        repo = self.repos.get(repo_id)
        if repo is None:
            raise HubError(404, f"Repository {repo_id} not found", "RepoNotFound")
        return repo

    def _sha(self, repo: dict, rev: str) -> str:
        if rev in repo["branches"]:
            return repo["branches"][rev]
        if rev in repo["commits"]:
            return rev
        raise HubError(404, f"Invalid rev id: {rev}", "RevisionNotFound")

    def _commit(self, repo: dict, branch: str, files: dict[str, bytes], message: str) -> str:
        parent = repo["branches"].get(branch, "")
        digest = hashlib.sha1(parent.encode() + message.encode() + str(len(repo["commits"])).encode())
        for path in sorted(files):
            digest.update(path.encode() + git_blob_oid(files[path]).encode())
        sha = digest.hexdigest()
        repo["commits"][sha] = dict(files)
        repo["branches"][branch] = sha
        return sha

    def create(self, repo_id: str) -> None:
        if repo_id in self.repos:  # the Hub's 409 still names the repo's url
            raise HubError(409, "You already created this model repo", url=f"{self.url}/{repo_id}")
        self.repos[repo_id] = {"branches": {}, "commits": {}}
        self._commit(self.repos[repo_id], "main", {".gitattributes": GITATTRIBUTES}, "initial commit")

    def files_at(self, repo_id: str, rev: str) -> tuple[str, dict[str, bytes]]:
        repo = self._repo(repo_id)
        sha = self._sha(repo, rev)
        return sha, repo["commits"][sha]


class _Handler(BaseHTTPRequestHandler):
    hub: FakeHub
    server_version = "FakeHub/1.0"

    def log_message(self, format, *args):  # quiet
        pass

    # -------------------------------------------------------------------------------- plumbing
    def _send(self, status: int, body: bytes = b"", headers: dict | None = None, content_type="application/json"):
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)

    def _json(self, status: int, value, headers: dict | None = None):
        self._send(status, json.dumps(value).encode(), headers)

    def _body(self) -> bytes:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        self.hub.received.append(body)
        return body

    def _dispatch(self):
        url = urlsplit(self.path)
        path, query = url.path, parse_qs(url.query)
        routes = ROUTES.get(self.command, [])
        for pattern, name in routes:
            match = re.fullmatch(pattern, path)
            if match:
                with self.hub.lock:
                    self.hub.calls.append((self.command, name))
                    self.hub.authorization.append(self.headers.get("Authorization"))
                params = {k: unquote(v) for k, v in match.groupdict().items() if v is not None}
                try:
                    with self.hub.lock:
                        getattr(self, name)(query=query, **params)
                except HubError as err:
                    headers = {"X-Error-Code": err.code} if err.code else {}
                    headers["X-Error-Message"] = err.message
                    self._json(err.status, {"error": err.message, **err.extra}, headers)
                return
        self.hub.calls.append((self.command, f"UNHANDLED {path}"))
        self._json(404, {"error": f"no route for {self.command} {path}"})

    do_GET = do_POST = do_HEAD = _dispatch

    # -------------------------------------------------------------------------------- routes
    def create_repo(self, query):
        payload = json.loads(self._body() or b"{}")
        repo_id = f"{payload.get('organization') or 'user'}/{payload['name']}"
        self.hub.create(repo_id)
        self._json(200, {"url": f"{self.hub.url}/{repo_id}", "name": repo_id, "id": repo_id})

    def validate_yaml(self, query):
        import yaml

        content = json.loads(self._body()).get("content", "")
        match = re.match(r"^---\n(.*?)\n---", content, re.S)
        try:
            yaml.safe_load(match.group(1) if match else "")
        except yaml.YAMLError as err:
            self._json(400, {"errors": [{"message": str(err)}], "warnings": []})
            return
        self._json(200, {"errors": [], "warnings": []})

    def create_branch(self, query, repo, branch):
        r = self.hub._repo(repo)
        if branch in r["branches"]:
            raise HubError(409, f"Reference refs/heads/{branch} already exists")
        r["branches"][branch] = r["branches"]["main"]
        self._json(200, {})

    def preupload(self, query, repo, rev):
        _, files = self.hub.files_at(repo, rev)
        payload = json.loads(self._body())
        out = [
            {"path": f["path"], "uploadMode": "regular", "shouldIgnore": False,
             "oid": git_blob_oid(files[f["path"]]) if f["path"] in files else None}
            for f in payload["files"]
        ]
        self._json(200, {"files": out})

    def commit(self, query, repo, rev):
        r = self.hub._repo(repo)
        if rev not in r["branches"]:
            raise HubError(404, f"Invalid rev id: {rev} (commits go to a branch)", "RevisionNotFound")
        files = dict(r["commits"][r["branches"][rev]])
        message = ""
        for line in self._body().splitlines():
            if not line.strip():
                continue
            item = json.loads(line)
            key, value = item["key"], item["value"]
            if key == "header":
                message = value.get("summary", "")
                parent = value.get("parentCommit")
                if parent and parent != r["branches"][rev]:
                    raise HubError(412, "A commit has happened since. Please refresh and try again.")
            elif key == "file":
                if value.get("encoding") != "base64":
                    raise HubError(400, f"unsupported encoding {value.get('encoding')!r}")
                files[value["path"]] = base64.b64decode(value["content"])
            elif key == "deletedFile":
                files.pop(value["path"], None)
            elif key == "deletedFolder":
                prefix = value["path"].rstrip("/") + "/"
                files = {p: d for p, d in files.items() if not p.startswith(prefix)}
            else:
                raise HubError(400, f"this test server does not store {key!r} operations (no LFS / Xet)")
        sha = self.hub._commit(r, rev, files, message)
        self._json(200, {"success": True, "commitOid": sha, "commitUrl": f"{self.hub.url}/{repo}/commit/{sha}",
                         "pullRequestUrl": None})

    def repo_info(self, query, repo, rev="main"):
        sha, files = self.hub.files_at(repo, rev)
        self._json(200, {
            "id": repo, "modelId": repo, "sha": sha, "private": False, "disabled": False, "gated": False,
            "lastModified": datetime.now(timezone.utc).isoformat().replace("+00:00", "Z"),
            "library_name": "dsf-lightning", "tags": [], "downloads": 0, "likes": 0,
            "siblings": [{"rfilename": p} for p in sorted(files)],
        })

    def tree(self, query, repo, rev, path=""):
        _, files = self.hub.files_at(repo, rev)
        prefix = path.strip("/") + "/" if path else ""
        entries = [
            {"type": "file", "path": p, "size": len(d), "oid": git_blob_oid(d)}
            for p, d in sorted(files.items()) if p.startswith(prefix)
        ]
        self._json(200, entries)

    def resolve(self, query, repo, rev, path):
        sha, files = self.hub.files_at(repo, rev)
        if path not in files:
            raise HubError(404, f"Entry not found: {path}", "EntryNotFound")
        data = files[path]
        headers = {"X-Repo-Commit": sha, "ETag": f'"{git_blob_oid(data)}"', "Accept-Ranges": "bytes"}
        rng = re.fullmatch(r"bytes=(\d+)-(\d*)", self.headers.get("Range", "") or "")
        if rng and self.command == "GET":
            start = int(rng.group(1))
            end = int(rng.group(2)) if rng.group(2) else len(data) - 1
            headers["Content-Range"] = f"bytes {start}-{end}/{len(data)}"
            self._send(206, data[start : end + 1], headers, "application/octet-stream")
            return
        self._send(200, data, headers, "application/octet-stream")


ROUTES = {
    "POST": [
        (r"/api/repos/create", "create_repo"),
        (r"/api/validate-yaml", "validate_yaml"),
        (rf"/api/models/{REPO}/branch/(?P<branch>.+)", "create_branch"),
        (rf"/api/models/{REPO}/preupload/(?P<rev>[^/]+)", "preupload"),
        (rf"/api/models/{REPO}/commit/(?P<rev>[^/]+)", "commit"),
    ],
    "GET": [
        (rf"/api/models/{REPO}/revision/(?P<rev>[^/]+)", "repo_info"),
        (rf"/api/models/{REPO}/tree/(?P<rev>[^/]+)(?:/(?P<path>.*))?", "tree"),
        (rf"/api/models/{REPO}", "repo_info"),
        (rf"/{REPO}/resolve/(?P<rev>[^/]+)/(?P<path>.+)", "resolve"),
    ],
    "HEAD": [
        (rf"/{REPO}/resolve/(?P<rev>[^/]+)/(?P<path>.+)", "resolve"),
    ],
}
