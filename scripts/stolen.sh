# Sourced by the benchmark scripts that alternate runs on a shared machine.
#
# stolen CMD...: runs CMD, then prints the cores other guests stole while
# it ran (the steal column of /proc/stat).
stolen() {
	local s0 t0 s1 t1
	s0=$(awk '/^cpu /{print $9}' /proc/stat); t0=$(date +%s%N)
	"$@"
	s1=$(awk '/^cpu /{print $9}' /proc/stat); t1=$(date +%s%N)
	awk -v s="$((s1 - s0))" -v t="$((t1 - t0))" -v hz="$(getconf CLK_TCK)" \
		'BEGIN { printf "  (%.2f cores stolen)\n", s / hz / (t / 1e9) }'
}
