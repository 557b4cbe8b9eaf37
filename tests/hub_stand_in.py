"""A local stand-in for the Hugging Face hub, reached through HF_ENDPOINT (tests use no network).

It answers the two requests huggingface_hub makes to fetch a file: the repository's file list
(`/api/models/ORG/NAME[/revision/REV]`) and each file (`HEAD`/`GET /ORG/NAME/resolve/REV/FILE`),
and records every request, so a test can check which files were fetched. A repository can be
served normally, gated (401 with the hub's `GatedRepo` error code) or missing (404).
"""

from __future__ import annotations

import hashlib
import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Mapping
from urllib.parse import unquote, urlsplit

COMMIT = "0123456789abcdef0123456789abcdef01234567"


class StandInHub:
    """`repos`: repo id -> {file path: bytes}; `gated`: repo ids that need a login."""

    def __init__(self, repos: Mapping[str, Mapping[str, bytes]], gated: tuple[str, ...] = ()):
        self.repos, self.gated, self.requests = repos, gated, []
        hub = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args) -> None:
                pass

            def do_GET(self) -> None:
                hub.answer(self)

            do_HEAD = do_GET

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.endpoint = f"http://127.0.0.1:{self.server.server_port}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> "StandInHub":
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.server.shutdown()
        self.server.server_close()

    def fetched(self) -> list[str]:
        """The file paths downloaded (GET of a `resolve` URL), in order."""
        return [path.split("/resolve/", 1)[1].split("/", 1)[1] for method, path in self.requests
                if method == "GET" and "/resolve/" in path]

    def answer(self, request: BaseHTTPRequestHandler) -> None:
        path = unquote(urlsplit(request.path).path)
        self.requests.append((request.command, path))
        if path.startswith("/api/models/"):
            repo = "/".join(path[len("/api/models/"):].split("/")[:2])
            if self._refused(request, repo):
                return
            siblings = [{"rfilename": name, "size": len(data)} for name, data in sorted(self.repos[repo].items())]
            return self._send(request, 200, json.dumps({"id": repo, "sha": COMMIT, "siblings": siblings}).encode(),
                              {"Content-Type": "application/json"})
        if "/resolve/" in path:
            repo, rest = path.lstrip("/").split("/resolve/", 1)
            name = rest.split("/", 1)[1]
            if self._refused(request, repo):
                return
            data = self.repos[repo].get(name)
            if data is None:
                return self._send(request, 404, b"{}", {"X-Error-Code": "EntryNotFound"})
            return self._send(request, 200, data, {"X-Repo-Commit": COMMIT,
                                                   "ETag": f'"{hashlib.sha1(data).hexdigest()}"'})
        self._send(request, 404, b"{}")

    def _refused(self, request: BaseHTTPRequestHandler, repo: str) -> bool:
        if repo in self.gated:
            self._send(request, 401, b'{"error": "Access restricted"}', {"X-Error-Code": "GatedRepo"})
            return True
        if repo not in self.repos:
            self._send(request, 404, b'{"error": "Repository not found"}', {"X-Error-Code": "RepoNotFound"})
            return True
        return False

    @staticmethod
    def _send(request: BaseHTTPRequestHandler, code: int, body: bytes, headers: Mapping[str, str]) -> None:
        request.send_response(code)
        for key, value in headers.items():
            request.send_header(key, value)
        request.send_header("Content-Length", str(len(body)))
        request.end_headers()
        if request.command != "HEAD":
            request.wfile.write(body)
