# The driver of one execution in a sandboxd bash context (embedded in sandboxd, run as
# `bash --noprofile --norc -c <this> bash <state folder> <here> [NAME...]`).
#
# A bash context keeps no process: each execution restores the state the previous one saved,
# sources the code, and saves the state again on exit (also after `exit N` in the code).
#
#   <state folder>/env    `export -p` of the last execution: the exported variables
#   <state folder>/cwd    its working folder
#   <state folder>/code   the code of this execution
#
# <here> is non-empty when the execution asked for a working folder: bash was started in it,
# and the saved one is not restored. Each NAME is a variable the request sets for this
# execution only; its value arrives as SANDBOXD_OVERRIDE_<NAME>. On exit such a variable gets
# back its previous value (or is unset) unless the code changed it.
#
# The state is written to env.new and cwd.new, then the file "saved" marks it complete;
# sandboxd renames the files into place after the execution, so a killed execution never
# leaves half a state behind.

__sandboxd_dir=$1
__sandboxd_here=$2
shift 2
__sandboxd_names=("$@")
set --
__sandboxd_start=$PWD
__sandboxd_new=()
__sandboxd_had=()
__sandboxd_old=()

if [[ -f $__sandboxd_dir/env ]]; then
	. "$__sandboxd_dir/env"
fi
if [[ -n $__sandboxd_here ]]; then
	cd -- "$__sandboxd_start" || true
elif [[ -f $__sandboxd_dir/cwd ]]; then
	__sandboxd_cwd=$(<"$__sandboxd_dir/cwd")
	cd -- "$__sandboxd_cwd" 2>/dev/null || cd -- "$__sandboxd_start" || true
fi

for __sandboxd_n in "${__sandboxd_names[@]}"; do
	__sandboxd_v=SANDBOXD_OVERRIDE_$__sandboxd_n
	if [[ -v $__sandboxd_n ]]; then
		__sandboxd_had+=(1)
		__sandboxd_old+=("${!__sandboxd_n}")
	else
		__sandboxd_had+=(0)
		__sandboxd_old+=("")
	fi
	__sandboxd_new+=("${!__sandboxd_v}")
	export "$__sandboxd_n=${!__sandboxd_v}"
	unset "$__sandboxd_v"
done

__sandboxd_save() {
	local __sandboxd_i __sandboxd_k
	for __sandboxd_i in "${!__sandboxd_names[@]}"; do
		__sandboxd_k=${__sandboxd_names[__sandboxd_i]}
		if [[ -v $__sandboxd_k && ${!__sandboxd_k} == "${__sandboxd_new[__sandboxd_i]}" ]]; then
			if [[ ${__sandboxd_had[__sandboxd_i]} == 1 ]]; then
				export "$__sandboxd_k=${__sandboxd_old[__sandboxd_i]}"
			else
				unset "$__sandboxd_k"
			fi
		fi
	done
	export -p >"$__sandboxd_dir/env.new" &&
		printf '%s' "$PWD" >"$__sandboxd_dir/cwd.new" &&
		: >"$__sandboxd_dir/saved"
}
trap __sandboxd_save EXIT
unset __sandboxd_n __sandboxd_v __sandboxd_cwd __sandboxd_here __sandboxd_start

. "$__sandboxd_dir/code"
