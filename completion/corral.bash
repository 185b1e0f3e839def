# bash completion for corral(1). Installed by `make install` to
# share/bash-completion/completions/corral (loaded on demand by
# bash-completion); or `source completion/corral.bash` by hand.
#
# The verbs and each verb's options are read from the binary's own --help
# (once per shell, cached), so a new option completes without editing this
# file; values are completed for the options that take a fixed set.

_corral_help_cache=()

# _corral_words VERB: the --options of `corral VERB --help` (VERB "" : verbs).
_corral_words() {
  local key=${1:-_verbs} i
  for i in "${!_corral_help_cache[@]}"; do
    [[ ${_corral_help_cache[i]} == "$key="* ]] && { printf '%s' "${_corral_help_cache[i]#*=}"; return; }
  done
  local words
  if [[ -z $1 ]]; then
    words=$(command "${_corral_bin:-corral}" --help 2>/dev/null |
      sed -n '/^commands:/,/^$/p' | awk '$1 ~ /^[a-z]+$/ {print $1}' | sort -u | tr '\n' ' ')
    words+="--help --version"
  else
    words=$(command "${_corral_bin:-corral}" "$1" --help 2>/dev/null | grep -oE -- '--[a-z][a-z0-9-]*' | sort -u | tr '\n' ' ')
  fi
  _corral_help_cache+=("$key=$words")
  printf '%s' "$words"
}

# The limit names of `corral run --help`'s table, as NAME=.
_corral_limits() {
  command "${_corral_bin:-corral}" run --help 2>/dev/null |
    sed -n '/^limits/,/^$/p' | awk 'NR > 1 && $1 ~ /^[a-z_]+$/ {print $1 "="}'
}

_corral() {
  local cur=${COMP_WORDS[COMP_CWORD]} prev=${COMP_WORDS[COMP_CWORD-1]}
  _corral_bin=${COMP_WORDS[0]}
  COMPREPLY=()
  if [[ $COMP_CWORD -eq 1 ]]; then
    COMPREPLY=($(compgen -W "$(_corral_words "")" -- "$cur"))
    return
  fi
  local verb=${COMP_WORDS[1]} i
  # After `--` or the first operand of run, the program and its own arguments.
  if [[ $verb == run ]]; then
    for ((i = 2; i < COMP_CWORD; i++)); do
      if [[ ${COMP_WORDS[i]} == -- ]]; then
        [[ $i -eq $((COMP_CWORD - 1)) ]] && COMPREPLY=($(compgen -c -- "$cur")) || COMPREPLY=($(compgen -f -- "$cur"))
        return
      fi
    done
  fi
  case $prev in
    --tier|-t|--min-tier) COMPREPLY=($(compgen -W "none process container" -- "$cur")); return ;;
    --net) COMPREPLY=($(compgen -W "none host" -- "$cur")); return ;;
    --on-output-limit) COMPREPLY=($(compgen -W "truncate kill" -- "$cur")); return ;;
    --limit|-l) compopt -o nospace 2>/dev/null; COMPREPLY=($(compgen -W "$(_corral_limits)" -- "$cur")); return ;;
    --routes|--audit|--input|--stdin|--jobs|-J|--output|-o|--summary) COMPREPLY=($(compgen -f -- "$cur")); return ;;
    --shard) COMPREPLY=($(compgen -W "auto" -- "$cur")); return ;;
    --artifact-root|--cwd|--rootfs|--write-path|--allow-host-path|--bind|--ro-bind)
      COMPREPLY=($(compgen -d -- "$cur")); return ;;
  esac
  if [[ $cur == -* ]]; then
    COMPREPLY=($(compgen -W "$(_corral_words "$verb")" -- "$cur"))
  elif [[ $verb == batch || $verb == merge ]]; then
    COMPREPLY=($(compgen -f -- "$cur"))
  elif [[ $verb == run ]]; then
    COMPREPLY=($(compgen -c -- "$cur"))
  fi
}

complete -F _corral corral
