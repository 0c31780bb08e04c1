"""Secrets never reach a report: names that look secret get their values shown as ``***``.

One place decides what looks secret, for environment variables (``HF_TOKEN``,
``MASTER_PASSWORD``, ``AWS_SECRET_ACCESS_KEY``), command-line flags (``--token X``,
``--api-key=X``) and free text that quotes either (a command line in an evidence string,
``user:password@`` in a URL). The name is split into words at ``_``/``-``/``.``, so
``NCCL_IB_PKEY`` (a partition number) stays readable while ``WANDB_API_KEY`` does not.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import TypeVar, overload

MASK = "***"
_K = TypeVar("_K")
_V = TypeVar("_V")

_SECRET_WORDS = frozenset({
    # Singular on purpose: evidence counts "tokens" (throughput) and names store "keys".
    "TOKEN", "APIKEY", "SECRET", "SECRETS", "PASSWORD", "PASSWD", "PASSPHRASE",
    "CREDENTIAL", "CREDENTIALS", "CREDS", "AUTHORIZATION", "COOKIE", "BEARER", "JWT", "DSN",
})
# Words that are secret only as part of a longer name (API_KEY, DB_PASS, SESSION_TOKEN):
# alone they name diagnostic facts ("key: rank_3_done" in a store timeout, a "signature").
_SECRET_IN_COMPOUND = frozenset({"KEY", "PASS", "PWD", "AUTH", "SESSION", "PRIVATE",
                                 "SIGNATURE", "PAT", "SAS"})
# Words that contain a secret word but name no secret.
_HARMLESS = frozenset({"PWD", "OLDPWD"})


def is_secret_name(name: str) -> bool:
    """True when an environment variable or flag called ``name`` may hold a secret."""
    bare = name.strip("'\"").lstrip("-").upper()
    if bare in _HARMLESS:
        return False
    words = [w for w in re.split(r"[_\-.]+", bare) if w]
    if any(w in _SECRET_WORDS or w.endswith(("TOKEN", "SECRET", "PASSWORD", "APIKEY"))
           for w in words):
        return True
    return len(words) > 1 and any(w in _SECRET_IN_COMPOUND for w in words)


def env_value(name: str, value: _V) -> _V | str:
    """``value``, or MASK when ``name`` looks secret."""
    return MASK if is_secret_name(name) and value not in (None, "") else value


def environ(env: Mapping[str, _V]) -> dict[str, _V | str]:
    """A copy of ``env`` with the values of secret-looking names masked."""
    return {k: env_value(k, v) for k, v in env.items()}


def argv(args: list[str]) -> list[str]:
    """A copy of a command line with the values of secret-looking flags masked.

    ``--token X`` -> ``--token ***``; ``--token=X`` and ``HF_TOKEN=X`` -> ``...=***``.
    """
    out: list[str] = []
    mask_next = False
    for a in args:
        if mask_next:
            out.append(MASK)
            mask_next = False
            continue
        name, eq, _value = a.partition("=")
        if eq and is_secret_name(name):
            out.append(f"{name}={MASK}")
        elif a.startswith("-") and not eq and is_secret_name(a):
            out.append(a)
            mask_next = True
        else:
            out.append(a)
    return out


_NAME = r"[A-Za-z_][\w.\-]*"
# Every pattern starts with a lookbehind that refuses to start inside a word: without it a
# failed match is retried at each character of a long word, and one 100 kB argument cost
# minutes (quadratic). With it, each word is scanned a bounded number of times.
_ASSIGN = re.compile(rf"(?<![\w.\-])(?P<name>--?{_NAME}|['\"]?{_NAME}['\"]?)"
                     r"(?P<sep>[ \t]*=[ \t]*|:[ \t]*|[ \t]+)")
# The value is matched apart, and only after a secret name: inside the one pattern a value
# that is one long word of names ("a=a=a=...", "x://u:p...") was scanned again from every
# name in it (quadratic).
_VALUE = re.compile(r"\"[^\"\n]*\"|'[^'\n]*'|\S+")
# scheme://user:password@host, the user may be empty (redis://:PW@host).
_URL_AUTH = re.compile(r"(?<![\w+.\-])(?P<scheme>[a-zA-Z][\w+.\-]*://)(?P<user>[^:/@\s]*)"
                       r":(?P<pw>[^@/\s]+)@")
_BEARER = re.compile(r"(?i)(?<![\w\-])(bearer|basic)\s+[A-Za-z0-9._~+/=\-]{8,}")
# An HTTP authorization header: everything after the scheme word is the credential.
_AUTH_HEADER = re.compile(r"(?i)(?<![\w\-])(?P<head>(?:proxy-)?authorization[\"']?[ \t]*[:=][ \t]*"
                          r"[\"']?(?:(?:bearer|basic|token|digest|negotiate)[ \t]+)?)"
                          r"(?P<cred>[^\s\"',;]+)")
# `-p VALUE`: the password flag of mysql, sshpass, redis-cli and others. Only a value that
# cannot be a port, a count or a path is masked: `-p 29500` and `mkdir -p /x` stay readable.
_SHORT_P = re.compile(r"(?<![\w\-])(?P<flag>-p)[ \t]+(?P<value>(?![\d/.~$\-])\S+)")


# Secrets known by their value's shape, whatever name (or none) stands before them: a JWT
# in `?state=...`, an AWS key id in prose, a GitHub/HF/OpenAI/Slack token in a URL's user
# part, a PEM private key. Each starts at a word boundary with a literal prefix, so a long
# word is scanned once (see _ASSIGN).
_SHAPES = re.compile(
    r"(?<![\w\-])(?:"
    r"eyJ[A-Za-z0-9_\-]{4,}\.eyJ[A-Za-z0-9_\-]{4,}\.[A-Za-z0-9_\-]*"  # JWT (JWS)
    r"|(?:AKIA|ASIA|AGPA|AIDA|AROA|ANPA|ANVA|AIPA)[A-Z0-9]{16}(?![A-Za-z0-9])"  # AWS key id
    r"|gh[pousr]_[A-Za-z0-9]{30,}|github_pat_[A-Za-z0-9_]{30,}"  # GitHub
    r"|glpat-[A-Za-z0-9_\-]{20,}"  # GitLab
    r"|hf_[A-Za-z0-9]{30,}"  # Hugging Face
    r"|sk-(?:proj-|ant-|live-|test-)?[A-Za-z0-9_\-]{20,}"  # OpenAI, Anthropic, Stripe
    r"|xox[abposr]-[A-Za-z0-9\-]{10,}"  # Slack
    r"|AIza[0-9A-Za-z_\-]{35}"  # Google API key
    r")")
# A PEM private key: the body after the BEGIN line, up to its END line or the end of text.
_PEM = re.compile(r"(?P<head>-----BEGIN [A-Z0-9 ]*PRIVATE KEY-----)(?P<body>.*?)"
                  r"(?=-----END [A-Z0-9 ]*PRIVATE KEY-----|\Z)", re.S)
# An AWS secret access key: 40 characters of base64 with upper, lower case and digits in
# one word (git hashes are lower-case hex; paths are cut by their dots and dashes).
_AWS_SECRET = re.compile(r"(?<![A-Za-z0-9/+])[A-Za-z0-9/+]{40}(?![A-Za-z0-9/+])")


def _aws_secret(m: re.Match[str]) -> str:
    v = m[0]
    mixed = (any(c.islower() for c in v) and any(c.isupper() for c in v)
             and any(c.isdigit() for c in v))
    return MASK if mixed else v


def shapes(s: str) -> str:
    """``s`` with secrets masked that are known by their value's shape alone."""
    if not s:
        return s
    s = _PEM.sub(lambda m: m["head"] + MASK if m["body"].strip() else m[0], s)
    s = _SHAPES.sub(MASK, s)
    return _AWS_SECRET.sub(_aws_secret, s)


def text(s: str) -> str:
    """``s`` with secrets masked where it quotes a secret-looking assignment or flag, or
    holds a value whose shape is a known secret's (``shapes``)."""
    if not s:
        return s
    s = shapes(s)
    s = _AUTH_HEADER.sub(lambda m: m["head"] + MASK if m["cred"] != MASK else m[0], s)
    s = _BEARER.sub(lambda m: f"{m.group(1)} {MASK}", s)
    s = _URL_AUTH.sub(lambda m: f"{m['scheme']}{m['user']}:{MASK}@", s)
    s = _SHORT_P.sub(lambda m: f"{m['flag']} {MASK}", s)
    out: list[str] = []
    pos = 0
    while (m := _ASSIGN.search(s, pos)) is not None:
        name, sep = m["name"], m["sep"]
        # "--token X" and "TOKEN=X" are assignments; "token expired" in prose is not.
        value = (_VALUE.match(s, m.end())
                 if is_secret_name(name) and (sep.strip() or name.startswith("-")) else None)
        if value is not None and value[0] != MASK:
            out.append(s[pos:value.start()] + MASK)
            pos = value.end()  # a masked value is consumed: each character scanned once
        else:  # step past the name only: the value may itself be a secret assignment
            out.append(s[pos:m.end("name")])
            pos = m.end("name")
    out.append(s[pos:])
    return "".join(out)


@overload
def keys(obj: dict[_K, _V]) -> dict[_K, object]: ...
@overload
def keys(obj: object) -> object: ...
def keys(obj: object) -> object:
    """``obj`` with its dict keys passed through ``text`` (a value can be a key: the env
    comparison's ``ranks_by_value``); ``deep`` does the values."""
    if isinstance(obj, dict):
        return {(text(k) if isinstance(k, str) else k): keys(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [keys(v) for v in obj]
    return obj


@overload
def deep(obj: str) -> str: ...
@overload
def deep(obj: dict[_K, _V]) -> dict[_K, object]: ...
@overload
def deep(obj: object) -> object: ...
def deep(obj: object) -> object:
    """``obj`` (JSON-like: dicts, lists, strings) with every secret masked.

    Dict keys that look secret mask their whole value; strings go through ``text``.
    """
    if isinstance(obj, dict):
        return {k: (MASK if isinstance(k, str) and is_secret_name(k)
                    and obj[k] not in (None, "", [], {}) else deep(v))
                for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [deep(v) for v in obj]
    if isinstance(obj, str):
        return text(obj)
    return obj
