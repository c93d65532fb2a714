"""Environment names no job may set for its command, whatever the operator's allow-list.

An allowed executable is contained by its arguments only if the environment cannot make
it (or a program it starts) run code of the job's choosing: bash runs `$BASH_ENV` and,
with `SHELLOPTS=xtrace`, expands `$PS4`; Python imports from `$PYTHONPATH`; the dynamic
loader loads `$LD_PRELOAD`; git runs `$GIT_SSH_COMMAND`. Each entry below is such a name
or the kit's own (it sets PATH, HOME and TMPDIR itself). The list covers the common
shells, interpreters, loaders and programs; it cannot cover every program, which is why
what a tenant may set at all is an allow-list the operator writes (kit.core.task_policy),
and this list only what the kit refuses on top of it.

Entries are exact names or prefixes ending in `*`, matched ignoring case (refusing
`bash_env` too costs nothing). docs/security.md lists them; the test
`tests/unit/test_core_env_names.py::test_the_security_page_lists_every_always_refused_name`
keeps the two the same.
"""

from __future__ import annotations

# (why, names): the reason is the refusal's, so it says what the name does.
_TABLE = (
    ("the kit sets it", "CRONFLEET_* PATH HOME TMPDIR"),
    (
        "the dynamic loader or the C library loads code or reads settings from it",
        "LD_* GLIBC_TUNABLES MALLOC_* GCONV_PATH GETCONF_DIR LOCPATH NLSPATH",
    ),
    (
        "a shell runs code from it",
        "BASH* ENV SHELLOPTS SHELL PS0 PS1 PS2 PS3 PS4 PROMPT_COMMAND IFS CDPATH GLOBIGNORE "
        "FPATH ZDOTDIR",
    ),
    (
        "an interpreter loads or runs code from it",
        "PYTHON* PERL* RUBY* GEM_* BUNDLE_* NODE_OPTIONS NODE_PATH NODE_REPL_EXTERNAL_MODULE "
        "JAVA_* _JAVA_OPTIONS JDK_JAVA_OPTIONS CLASSPATH DOTNET_* CORECLR_* COMPLUS_* PHPRC "
        "PHP_INI_SCAN_DIR LUA_* TCLLIBPATH TCL_LIBRARY R_PROFILE* R_ENVIRON* R_LIBS* ERL_* "
        "GUILE_* AWKPATH AWKLIBPATH",
    ),
    (
        "a library loads plugins from it",
        "OPENSSL_* SASL_PATH KRB5_CONFIG GIO_EXTRA_MODULES GIO_MODULE_DIR GTK_MODULES GTK_PATH "
        "QT_PLUGIN_PATH",
    ),
    (
        "a program runs it as a command, or reads commands or configuration from it",
        "EDITOR VISUAL PAGER MANPAGER MANOPT BROWSER LESSOPEN LESSCLOSE SYSTEMD_PAGER "
        "SYSTEMD_EDITOR PSQL_PAGER PSQLRC GIT_* SSH_ASKPASS SUDO_ASKPASS RSYNC_RSH "
        "RSYNC_CONNECT_PROG CVS_RSH TAR_OPTIONS MAKEFLAGS MAKEFILES MFLAGS PIP_* NPM_CONFIG_* "
        "EXINIT VIMINIT GVIMINIT MYVIMRC WGETRC XDG_* KUBECONFIG AWS_CONFIG_FILE DOCKER_CONFIG "
        "GNUPGHOME",
    ),
)
ALWAYS_REFUSED_ENV: tuple[tuple[str, tuple[str, ...]], ...] = tuple(
    (why, tuple(names.split())) for why, names in _TABLE
)

_EXACT = {n: why for why, names in ALWAYS_REFUSED_ENV for n in names if not n.endswith("*")}
_PREFIXES = tuple((n[:-1], why) for why, names in ALWAYS_REFUSED_ENV for n in names if n[-1] == "*")


def always_refused(name: str) -> str | None:
    """Why no job may set `name` (ignoring case), or None if the operator may allow it."""
    upper = name.upper()
    if upper in _EXACT:
        return _EXACT[upper]
    return next((why for prefix, why in _PREFIXES if upper.startswith(prefix)), None)


def always_refused_prefix(prefix: str) -> str | None:
    """Why every name starting with `prefix` is always refused, or None if some is not:
    an allow-list entry `PREFIX*` that could only ever name refused names is a mistake."""
    upper = prefix.upper()
    return next((why for p, why in _PREFIXES if upper.startswith(p)), None)
