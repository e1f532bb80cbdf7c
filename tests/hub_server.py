"""A minimal in-memory Hugging Face Hub for tests: what ``huggingface_hub`` 2.x calls for ``create_repo``,
``create_branch``, ``upload_folder`` (README metadata check, preupload, commit with inline base64 files),
``repo_info``, ``list_repo_tree`` and ``hf_hub_download`` (HEAD/GET ``resolve`` with the Hub's headers and error
codes), for model and dataset repositories (``repo_type="dataset"``: enough for ``datasets.load_dataset`` of a
script-free dataset repo, streamed or not).

Usage: ``with HubServer() as hub: os.environ["HF_ENDPOINT"] = hub.url``; ``hub.requests`` lists what was asked.
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import unquote, urlsplit

import yaml

_REPO = r"(?P<repo>[^/]+/[^/]+)"
_KIND = r"(?P<kind>models|datasets)"
_REV = r"(?P<rev>[^/]+)"


def git_blob_sha1(content: bytes) -> str:
    """The git object id of a blob (what the Hub reports as a regular file's oid)."""
    return hashlib.sha1(b"blob %d\0" % len(content) + content).hexdigest()


@dataclass
class Repo:
    branches: dict[str, str] = field(default_factory=dict)  # branch -> commit id
    commits: dict[str, dict[str, bytes]] = field(default_factory=dict)  # commit id -> files

    def resolve(self, rev: str) -> str | None:
        return self.branches.get(rev) or (rev if rev in self.commits else None)


class HubServer:
    """Threaded HTTP server on 127.0.0.1 (random port) that stores repositories in memory."""

    def __init__(self) -> None:
        self.repos: dict[str, Repo] = {}
        self.requests: list[tuple[str, str]] = []
        self.lock = threading.Lock()
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), _handler(self))
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True)

    def __enter__(self) -> HubServer:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(timeout=5)

    def commit(self, repo: Repo, branch: str, files: dict[str, bytes]) -> str:
        oid = hashlib.sha1(f"{len(repo.commits)}:{sorted(files)}".encode() + b"".join(files.values())).hexdigest()
        repo.commits[oid] = files
        repo.branches[branch] = oid
        return oid


def _file_entry(path: str, content: bytes) -> dict:
    return {"type": "file", "path": path, "size": len(content), "oid": git_blob_sha1(content)}


def _handler(hub: HubServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args: object) -> None:  # keep test output clean
            pass

        # ---------------------------------------------------------------- helpers
        def _send(self, status: int, body: bytes = b"", headers: dict[str, str] | None = None) -> None:
            self.send_response(status)
            for key, value in (headers or {}).items():
                self.send_header(key, value)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(body)

        def _json(self, status: int, value: object, headers: dict[str, str] | None = None) -> None:
            self._send(status, json.dumps(value).encode(), {"Content-Type": "application/json", **(headers or {})})

        def _error(self, status: int, code: str, headers: dict[str, str] | None = None) -> None:
            self._json(status, {"error": code}, {"X-Error-Code": code, "X-Error-Message": code, **(headers or {})})

        def _body(self) -> bytes:
            return self.rfile.read(int(self.headers.get("Content-Length") or 0))

        def _repo(self, repo_id: str) -> Repo | None:
            repo = hub.repos.get(repo_id)
            if repo is None:
                self._error(404, "RepoNotFound")
            return repo

        # ---------------------------------------------------------------- routing
        def do_HEAD(self) -> None:
            self._route()

        def do_GET(self) -> None:
            self._route()

        def do_POST(self) -> None:
            self._route()

        def _route(self) -> None:
            path = unquote(urlsplit(self.path).path)
            hub.requests.append((self.command, path))
            routes = [
                ("POST", r"/api/repos/create", self._create_repo),
                ("POST", r"/api/validate-yaml", self._validate_yaml),
                ("POST", rf"/api/{_KIND}/{_REPO}/preupload/{_REV}", self._preupload),
                ("POST", rf"/api/{_KIND}/{_REPO}/commit/{_REV}", self._commit),
                ("POST", rf"/api/{_KIND}/{_REPO}/branch/(?P<branch>[^/]+)", self._create_branch),
                ("GET", rf"/api/{_KIND}/{_REPO}/tree/{_REV}(?:/(?P<path>.*))?", self._tree),
                ("GET", rf"/api/{_KIND}/{_REPO}(?:/revision/{_REV})?", self._info),
                ("HEAD", rf"/(?P<kind>datasets)/{_REPO}/resolve/{_REV}/(?P<path>.+)", self._resolve),
                ("GET", rf"/(?P<kind>datasets)/{_REPO}/resolve/{_REV}/(?P<path>.+)", self._resolve),
                ("HEAD", rf"/{_REPO}/resolve/{_REV}/(?P<path>.+)", self._resolve),
                ("GET", rf"/{_REPO}/resolve/{_REV}/(?P<path>.+)", self._resolve),
            ]
            with hub.lock:
                for method, pattern, action in routes:
                    match = re.fullmatch(pattern, path)
                    if method == self.command and match:
                        found = {k: v for k, v in match.groupdict().items() if v is not None}
                        if found.get("kind") == "datasets":  # dataset repos live under their own keys
                            found["repo"] = f"datasets/{found['repo']}"
                        found.pop("kind", None)
                        action(**found)
                        return
                self._body()
                self._error(404, "NotFound")

        # ---------------------------------------------------------------- endpoints
        def _create_repo(self) -> None:
            payload = json.loads(self._body())
            repo_id = f"{payload.get('organization') or 'user'}/{payload['name']}"
            url = f"{hub.url}/{repo_id}"
            if payload.get("type") == "dataset":
                repo_id, url = f"datasets/{repo_id}", f"{hub.url}/datasets/{repo_id}"
            if repo_id in hub.repos:
                self._json(409, {"error": "You already created this model repo", "url": f"{hub.url}/{repo_id}"})
                return
            repo = hub.repos[repo_id] = Repo()
            hub.commit(repo, "main", {".gitattributes": b""})
            self._json(200, {"url": url, "name": repo_id.removeprefix("datasets/")})

        def _validate_yaml(self) -> None:
            """README.md metadata: the YAML between the leading ``---`` lines must parse to a mapping."""
            content = json.loads(self._body())["content"]
            match = re.match(r"---\n(.*?)\n---\n", content, re.S)
            try:
                ok = match is None or isinstance(yaml.safe_load(match.group(1)), dict)
            except yaml.YAMLError:
                ok = False
            if ok:
                self._json(200, {"errors": [], "warnings": []})
            else:
                self._json(400, {"errors": [{"message": "invalid YAML metadata"}]}, {"X-Error-Code": "BadRequest"})

        def _create_branch(self, repo: str, branch: str) -> None:
            self._body()
            if (found := self._repo(repo)) is None:
                return
            if branch in found.branches:
                self._error(409, "BranchAlreadyExists")
                return
            found.branches[branch] = found.branches["main"]
            self._json(200, {})

        def _preupload(self, repo: str, rev: str) -> None:
            payload = json.loads(self._body())
            if (found := self._repo(repo)) is None:
                return
            current = found.commits.get(found.resolve(rev) or "", {})
            files = [
                {
                    "path": f["path"],
                    "uploadMode": "regular",  # inline base64 in the commit: no LFS / Xet storage needed
                    "shouldIgnore": False,
                    "oid": git_blob_sha1(current[f["path"]]) if f["path"] in current else None,
                }
                for f in payload["files"]
            ]
            self._json(200, {"files": files, "commitOid": found.resolve(rev)})

        def _commit(self, repo: str, rev: str) -> None:
            lines = [json.loads(line) for line in self._body().splitlines() if line.strip()]
            if (found := self._repo(repo)) is None:
                return
            parent = found.resolve(rev)
            if parent is None:
                self._error(404, "RevisionNotFound")
                return
            files = dict(found.commits[parent])
            for line in lines:
                key, value = line["key"], line["value"]
                if key == "file":
                    files[value["path"]] = base64.b64decode(value["content"])
                elif key == "deletedFile":
                    files.pop(value["path"], None)
                elif key == "deletedFolder":
                    files = {p: c for p, c in files.items() if not p.startswith(value["path"].rstrip("/") + "/")}
                elif key != "header":
                    self._error(400, f"unsupported commit operation {key!r} (only inline files)")
                    return
            oid = hub.commit(found, rev, files)
            self._json(200, {"commitUrl": f"{hub.url}/{repo}/commit/{oid}", "commitOid": oid, "success": True})

        def _files(self, repo: str, rev: str) -> tuple[str, dict[str, bytes]] | None:
            if (found := self._repo(repo)) is None:
                return None
            oid = found.resolve(rev)
            if oid is None:
                self._error(404, "RevisionNotFound")
                return None
            return oid, found.commits[oid]

        def _info(self, repo: str, rev: str = "main") -> None:
            if (resolved := self._files(repo, rev)) is None:
                return
            oid, files = resolved
            siblings = [{"rfilename": path} for path in sorted(files)]
            name = repo.removeprefix("datasets/")
            self._json(200, {"id": name, "modelId": name, "sha": oid, "private": False, "siblings": siblings})

        def _tree(self, repo: str, rev: str, path: str = "") -> None:
            if (resolved := self._files(repo, rev)) is None:
                return
            prefix = path.strip("/") + "/" if path.strip("/") else ""
            entries, folders = [], set()
            for name, content in sorted(resolved[1].items()):
                if not name.startswith(prefix):
                    continue
                rest = name[len(prefix) :]
                if "/" in rest:
                    folders.add(prefix + rest.split("/")[0])
                else:
                    entries.append(_file_entry(name, content))
            entries += [{"type": "directory", "path": folder, "oid": "0" * 40, "size": 0} for folder in sorted(folders)]
            self._json(200, entries)

        def _resolve(self, repo: str, rev: str, path: str) -> None:
            if (resolved := self._files(repo, rev)) is None:
                return
            oid, files = resolved
            if path not in files:
                self._error(404, "EntryNotFound", {"X-Repo-Commit": oid})
                return
            content = files[path]
            self._send(200, content, {"X-Repo-Commit": oid, "ETag": f'"{git_blob_sha1(content)}"'})

    return Handler
