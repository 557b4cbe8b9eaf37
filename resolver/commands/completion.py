"""`accord completion bash|zsh`: a shell completion script generated from both catalogs.

The script completes subcommands, every flag spelling of the system in use (`--system`, default
llm), after a flag with a closed or known set of values those values, and after the `--help` of a
launch command the flag groups it lists. It embeds both systems' spellings so one installed script
follows `--system` on the command line being completed. It is plain data rendered in a fixed order,
so the same catalogs always give the same script.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from typing import Any, Callable, Iterable

from accord.resolver.cli import COMMANDS
from accord.resolver.errors import UsageError
from accord.resolver.exploring.matrix import STRATEGIES
from accord.resolver.facts.machine import list_presets
from accord.resolver.language.catalog import SYSTEMS, Catalog, Flag, load_catalog

SHELLS = ("bash", "zsh")
# Subcommands that take launch flags; the others only get --help.
LAUNCH_COMMANDS = ("resolve", "why", "launch", "serve", "matrix")
# Subcommands whose `--help GROUP` lists one flag group (resolver/commandline/commandhelp.py).
HELP_GROUP_COMMANDS = ("resolve", "why", "launch", "serve", "tune")
OWN_OPTIONS = ("--system", "--config", "--facts", "--fact", "--help")
FLAGS_OPTIONS = ("--system", "--group", "--json", "--help")
MATRIX_OPTIONS = ("--system", "--facts", "--axes", "--values", "--strategy", "--max-rows", "--seed",
                  "--format", "--help")
MATRIX_STRATEGIES = tuple(STRATEGIES)
MATRIX_FORMATS = ("github", "json", "yaml", "csv")  # matrix --format choices (tests check they match)


def _names(catalog: Catalog) -> list[str]:
    """Flag names, as `accord why` and `matrix --axes/--values` take them."""
    return [flag.name for flag in catalog if not flag.meta]


def _spellings(catalog: Catalog) -> list[str]:
    return [s for flag in catalog if not flag.meta for s in flag.option_strings]


def _values(flag: Flag) -> list[str]:
    """Words worth offering after one of this flag's spellings."""
    if flag.choices:
        return [str(c) for c in flag.choices]
    if flag.type == "bool" and flag.value_optional:
        return ["true", "false"]
    return []


def _value_cases(catalog: Catalog) -> list[tuple[str, str, list[str]]]:
    """(system, spelling, values) for every spelling that takes a value with a known set."""
    cases = []
    for flag in catalog:
        values = _values(flag)
        if not values:
            continue
        renamed = tuple(d.flag for d in flag.deprecated_spellings if d.value is None)
        takes_value = flag.flags + flag.short_forms + renamed
        cases.extend((catalog.system, spelling, values) for spelling in takes_value)
    return cases


def _words(items) -> str:
    return " ".join(shlex.quote(str(i)) for i in items)


@dataclass(frozen=True)
class _Syntax:
    """How one shell writes the script's data: the two scripts share the data and differ only here."""

    array: Callable[[Iterable[Any]], str]  # the value of a variable holding a word list
    words: Callable[[Iterable[Any]], str]  # a word list written in place, after compgen -W / compadd
    options: Callable[[Iterable[Any]], str]  # option words joined to a variable's words in one list
    value_case: Callable[[str, list[str]], str]  # one `system spelling` case of _accord_values


_BASH = _Syntax(
    array=lambda items: shlex.quote(" ".join(items)),
    words=lambda items: shlex.quote(" ".join(items)),
    options=" ".join,
    value_case=lambda key, values: f"        {shlex.quote(key)}) echo {shlex.quote(' '.join(values))} ;;",
)
_ZSH = _Syntax(
    array=lambda items: f"({_words(items)})",
    words=_words,
    options=_words,
    value_case=lambda key, values: f"        ({shlex.quote(key)}) reply=({_words(values)}) ;;",
)


def _bash(catalogs: list[Catalog]) -> str:
    """The bash script: `complete -F` calls _accord, which fills COMPREPLY."""
    return _render(_BASH_SCRIPT, _BASH, catalogs)


def _zsh(catalogs: list[Catalog]) -> str:
    """The zsh script: a #compdef function that offers words with compadd."""
    return _render(_ZSH_SCRIPT, _ZSH, catalogs)


def _render(template: str, syntax: _Syntax, catalogs: list[Catalog]) -> str:
    """One shell's script: its template filled with the data both shells' scripts share."""
    return template.format(variables=_variables(syntax, catalogs), cases=_cases(syntax, catalogs),
                           **_inline_words(syntax))


def _variables(syntax: _Syntax, catalogs: list[Catalog]) -> str:
    """The variables the script opens with, so the completion functions look words up, not rebuild them."""
    per_system = [
        [f"_accord_{c.system}_flags={syntax.array(_spellings(c))}" for c in catalogs],
        [f"_accord_{c.system}_names={syntax.array(_names(c))}" for c in catalogs],
        [f"_accord_{c.system}_groups={syntax.array(sorted({f.group for f in c}))}" for c in catalogs],
    ]
    return "\n".join([f"_accord_commands={syntax.array(COMMANDS)}",
                      f"_accord_presets={syntax.array(list_presets() + ['probe'])}",
                      *("\n".join(lines) for lines in per_system)])


def _cases(syntax: _Syntax, catalogs: list[Catalog]) -> str:
    """The cases of _accord_values: one per spelling of a flag whose values are a known set."""
    return "\n".join(syntax.value_case(f"{system} {spelling}", values)
                     for c in catalogs for system, spelling, values in _value_cases(c))


def _inline_words(syntax: _Syntax) -> dict[str, str]:
    """The fixed word lists the completion functions offer in place (not per system, so no variable)."""
    return {
        "systems": syntax.words(SYSTEMS),
        "strategies": syntax.words(MATRIX_STRATEGIES),
        "formats": syntax.words(MATRIX_FORMATS),
        "shells": syntax.words(SHELLS),
        "matrix_options": syntax.options(MATRIX_OPTIONS),
        "flags_options": syntax.options(FLAGS_OPTIONS),
        "own_options": syntax.options(OWN_OPTIONS),
        "help_group_commands": "|".join(HELP_GROUP_COMMANDS),
        "launch_commands": "|".join(c for c in LAUNCH_COMMANDS if c != "matrix"),
    }


# The scripts, as str.format templates (so a literal brace is doubled). {variables} opens each
# with the data, {cases} is the body of _accord_values and the rest are _inline_words' lists.
_BASH_SCRIPT = """# bash completion for accord; generated by `accord completion bash` from the flag catalogs.
# Load it with:  source <(accord completion bash)
{variables}

# Complete the last item of a comma-separated list (matrix --facts h100,b2<TAB>).
_accord_list() {{
    local head="" last="$cur"
    if [[ $cur == *,* ]]; then head="${{cur%,*}},"; last="${{cur##*,}}"; fi
    COMPREPLY=($(compgen -P "$head" -W "$1" -- "$last"))
}}

_accord_values() {{
    case "$1 $2" in
{cases}
    esac
}}

_accord() {{
    local cur="${{COMP_WORDS[COMP_CWORD]}}" prev="${{COMP_WORDS[COMP_CWORD-1]}}"
    if (( COMP_CWORD == 1 )); then
        COMPREPLY=($(compgen -W "$_accord_commands" -- "$cur")); return
    fi
    local cmd="${{COMP_WORDS[1]}}" system=llm i
    for (( i = 2; i < COMP_CWORD; i++ )); do
        [[ ${{COMP_WORDS[i]}} == --system ]] && system="${{COMP_WORDS[i+1]}}"
    done
    local names="_accord_${{system}}_names"
    case "$prev" in
        --system) COMPREPLY=($(compgen -W {systems} -- "$cur")); return ;;
        --config) COMPREPLY=($(compgen -f -- "$cur")); return ;;
        --facts)
            if [[ $cmd == matrix ]]; then _accord_list "$_accord_presets"
            else COMPREPLY=($(compgen -W "$_accord_presets" -f -- "$cur")); fi
            return ;;
        --axes) [[ $cmd == matrix ]] && {{ _accord_list "${{!names}}"; return; }} ;;
        --values) [[ $cmd == matrix ]] && {{ COMPREPLY=($(compgen -S = -W "${{!names}}" -- "$cur")); compopt -o nospace 2>/dev/null; return; }} ;;
        --strategy) [[ $cmd == matrix ]] && {{ COMPREPLY=($(compgen -W {strategies} -- "$cur")); return; }} ;;
        --format) [[ $cmd == matrix ]] && {{ COMPREPLY=($(compgen -W {formats} -- "$cur")); return; }} ;;
        --group)
            local groups="_accord_${{system}}_groups"
            COMPREPLY=($(compgen -W "${{!groups}}" -- "$cur")); return ;;
        --help|-h)
            case "$cmd" in
                {help_group_commands})
                    local groups="_accord_${{system}}_groups"
                    COMPREPLY=($(compgen -W "${{!groups}} all" -- "$cur")); return ;;
            esac ;;
    esac
    local values; values="$(_accord_values "$system" "$prev")"
    if [[ -n $values ]]; then
        COMPREPLY=($(compgen -W "$values" -- "$cur")); return
    fi
    local flags="_accord_${{system}}_flags"
    if [[ $cmd == why && $cur != -* ]]; then  # the flags to explain come first, as names
        local bare=1
        for (( i = 2; i < COMP_CWORD; i++ )); do [[ ${{COMP_WORDS[i]}} == -* ]] && bare=0; done
        if (( bare )); then COMPREPLY=($(compgen -W "${{!names}}" -- "$cur")); return; fi
    fi
    case "$cmd" in
        completion) COMPREPLY=($(compgen -W {shells} -- "$cur")) ;;
        matrix) COMPREPLY=($(compgen -W "{matrix_options} ${{!flags}}" -- "$cur")) ;;
        flags) COMPREPLY=($(compgen -W "{flags_options} ${{!flags}}" -- "$cur")) ;;
        {launch_commands}) COMPREPLY=($(compgen -W "{own_options} ${{!flags}}" -- "$cur")) ;;
        *) COMPREPLY=($(compgen -W "--help" -- "$cur")) ;;
    esac
}}
complete -o default -F _accord accord
"""

_ZSH_SCRIPT = """#compdef accord
# zsh completion for accord; generated by `accord completion zsh` from the flag catalogs.
# Load it with:  source <(accord completion zsh)   (after compinit), or save it as _accord in $fpath.
{variables}

_accord_values() {{
    reply=()
    case "$1 $2" in
{cases}
    esac
}}

_accord() {{
    if (( CURRENT == 2 )); then
        compadd -- $_accord_commands; return
    fi
    local cmd=${{words[2]}} prev=${{words[CURRENT-1]}} system=llm i
    for (( i = 3; i < CURRENT; i++ )); do
        [[ ${{words[i]}} == --system ]] && system=${{words[i+1]}}
    done
    local -a names
    names=(${{(P)${{:-_accord_${{system}}_names}}}})
    case $prev in
        --system) compadd -- {systems}; return ;;
        --config) _files; return ;;
        --facts)
            if [[ $cmd == matrix ]]; then compset -P '*,'; compadd -- $_accord_presets
            else compadd -- $_accord_presets; _files; fi
            return ;;
        --axes) if [[ $cmd == matrix ]]; then compset -P '*,'; compadd -- $names; return; fi ;;
        --values) if [[ $cmd == matrix ]]; then compadd -S = -- $names; return; fi ;;
        --strategy) if [[ $cmd == matrix ]]; then compadd -- {strategies}; return; fi ;;
        --format) if [[ $cmd == matrix ]]; then compadd -- {formats}; return; fi ;;
        --group) compadd -- ${{(P)${{:-_accord_${{system}}_groups}}}}; return ;;
        --help|-h)
            if [[ $cmd == ({help_group_commands}) ]]; then
                compadd -- ${{(P)${{:-_accord_${{system}}_groups}}}} all; return
            fi ;;
    esac
    local -a reply
    _accord_values $system $prev
    if (( ${{#reply}} )); then
        compadd -- $reply; return
    fi
    local -a flags
    flags=(${{(P)${{:-_accord_${{system}}_flags}}}})
    if [[ $cmd == why && ${{words[CURRENT]}} != -* && ${{(M)words[3,CURRENT-1]:#-*}} == "" ]]; then
        compadd -- $names; return  # the flags to explain come first, as names
    fi
    case $cmd in
        completion) compadd -- {shells} ;;
        matrix) compadd -- {matrix_options} $flags ;;
        flags) compadd -- {flags_options} $flags ;;
        {launch_commands}) compadd -- {own_options} $flags ;;
        *) compadd -- --help ;;
    esac
}}

if [[ $funcstack[1] == _accord ]]; then
    _accord "$@"
else
    compdef _accord accord
fi
"""


def script(shell: str) -> str:
    """The completion script for a shell, covering both systems."""
    catalogs = [load_catalog(system) for system in SYSTEMS]
    if shell == "bash":
        return _bash(catalogs)
    if shell == "zsh":
        return _zsh(catalogs)
    raise UsageError(f"unknown shell {shell!r}; use one of: {', '.join(SHELLS)}.")


def main(argv: list[str]) -> int:
    if argv and argv[0] in ("-h", "--help"):
        print("usage: accord completion {bash,zsh}\n\nPrint a completion script; load it with "
              "`source <(accord completion bash)`.")
        return 0
    if len(argv) != 1:
        raise UsageError("usage: accord completion {bash,zsh} (exactly one shell).")
    print(script(argv[0]), end="")
    return 0
