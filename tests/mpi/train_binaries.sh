#!/usr/bin/env bash
# The training binaries under mpirun: 2 ranks train as 1 process with the
# same global batch (the losses of every step agree to float32 rounding), for
# train_lm with each attention (dropout on: the ranks draw their rows' share),
# train_mt and train_vit; and a checkpoint of a 2-rank run resumes in one
# process, and one of a 1-process run on 2 ranks, with the same losses.
# Usage: train_binaries.sh BIN_DIR MPIRUN...   (MPIRUN: the launcher and its flags, up to -n 2)
set -euo pipefail
bin="$1"
shift
mpirun=("$@")
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
export OMP_NUM_THREADS=1

# "step loss" of every training step in a run directory's log.
losses() { grep -o '"type":"train","step":[0-9]*,"loss":[-0-9.e+]*' "$1/log.jsonl" | sed 's/.*"step":\([0-9]*\),"loss":/\1 /'; }

# same_losses WHAT DIR_A DIR_B [resumed]: the same steps (with `resumed`: DIR_A's
# steps from DIR_B's first on), losses within 1e-4 (relative).
same_losses() {
  local what="$1"
  losses "$3" > "$tmp/b"
  losses "$2" | awk -v first="$(head -n 1 "$tmp/b" | cut -d' ' -f1)" -v resumed="${4:-}" \
    'resumed == "" || $1 >= first' > "$tmp/a"
  [ "$(cut -d' ' -f1 "$tmp/a")" == "$(cut -d' ' -f1 "$tmp/b")" ] && [ -s "$tmp/a" ] ||
    { echo "train_binaries: $what: the runs logged different steps" >&2; exit 1; }
  paste -d' ' "$tmp/a" "$tmp/b" | awk -v what="$what" '
    { d = $2 - $4; if (d < 0) d = -d; r = d / ($2 < 0 ? -$2 : $2); if (r > worst) worst = r }
    END { printf "train_binaries: %s: %d steps, largest relative loss difference %.2g\n", what, NR, worst
          if (worst > 1e-4) { print "train_binaries: " what ": the losses differ" > "/dev/stderr"; exit 1 } }'
}

# one_and_two NAME BINARY ARGS...: the binary in one process and on two ranks.
one_and_two() {
  local name="$1" binary="$2"
  shift 2
  "$bin/$binary" "$@" --ckpt "$tmp/$name-1" > "$tmp/$name-1.log"
  "${mpirun[@]}" "$bin/$binary" "$@" --ckpt "$tmp/$name-2" > "$tmp/$name-2.log"
  grep -q "on 2 ranks" "$tmp/$name-2.log" || { echo "train_binaries: $name did not train on 2 ranks" >&2; exit 1; }
  same_losses "$name, 1 process vs 2 ranks" "$tmp/$name-1" "$tmp/$name-2"
}

# resumed FROM TO LAUNCH...: FROM's step-5 checkpoint (kept as the previous
# one at step 10) resumed by LAUNCH in TO; the run must then match FROM.
resumed() {
  local from="$1" to="$2"
  shift 2
  mkdir -p "$to"
  cp "$from/checkpoint.prev.safetensors" "$to/checkpoint.safetensors"
  "$@" --ckpt "$to" --resume > "$to.log"
  grep -q "resumed from step 5" "$to.log" || { echo "train_binaries: $to did not resume at step 5" >&2; exit 1; }
}

head -n 300 "$root/README.md" > "$tmp/text.txt"
tiny=(--dim 32 --heads 4 --layers 1 --ffn 64 --warmup 2 --steps 10 --eval-every 5 --ckpt-every 5 --threads 1)
lm=(--data "$tmp/text.txt" --context 16 --batch 6 --eval-tokens 256 --dropout 0.1 "${tiny[@]}")
for attn in mha moa moh; do
  one_and_two "lm-$attn" train_lm "${lm[@]}" --attn "$attn"
done
one_and_two "lm-mae" train_lm "${lm[@]}" --attn mae --bcd-f 3 --bcd-g 2
args=("${lm[@]}" --attn moa)
resumed "$tmp/lm-moa-2" "$tmp/two-to-one" "$bin/train_lm" "${args[@]}"
same_losses "lm-moa, 2-rank checkpoint resumed in 1 process" "$tmp/lm-moa-1" "$tmp/two-to-one" resumed
resumed "$tmp/lm-moa-1" "$tmp/one-to-two" "${mpirun[@]}" "$bin/train_lm" "${args[@]}"
same_losses "lm-moa, 1-process checkpoint resumed on 2 ranks" "$tmp/lm-moa-1" "$tmp/one-to-two" resumed

# train_mt on a generated parallel corpus: pairs of different lengths.
words=(one:eins two:zwei three:drei four:vier five:fünf six:sechs seven:sieben eight:acht)
for a in "${words[@]}"; do for b in "${words[@]}"; do
  printf '%s and %s\t%s und %s\n' "${a%%:*}" "${b%%:*}" "${a##*:}" "${b##*:}"
  printf '%s\t%s\n' "${a%%:*}" "${a##*:}"
done; done > "$tmp/pairs.tsv"
one_and_two mt train_mt --data "$tmp/pairs.tsv" --valid-pairs 8 --test-pairs 8 --bpe-merges 20 --batch 8 \
  --bleu-sentences 4 --dropout 0.1 "${tiny[@]}" --attn mae --bcd-f 3 --bcd-g 2

# train_vit on generated IDX files: 24 random 8x8 images, labels 0..9.
idx() { printf "\x00\x00\x08\x0$1"; shift; for d in "$@"; do printf "$(printf '\\x%02x\\x%02x\\x%02x\\x%02x' 0 0 0 "$d")"; done; }
mkdir -p "$tmp/fm"
for part in train:24 t10k:8; do
  name=${part%%:*}; n=${part##*:}
  { idx 3 "$n" 8 8; head -c $((n * 64)) /dev/urandom; } > "$tmp/fm/$name-images-idx3-ubyte"
  { idx 1 "$n"; for i in $(seq "$n"); do printf "\x0$((i % 10))"; done; } > "$tmp/fm/$name-labels-idx1-ubyte"
done
one_and_two vit train_vit --data "$tmp/fm" --valid-images 4 --batch 8 --patch 4 "${tiny[@]}" --attn moh
# Ranks started with different settings (MPMD: one --lr each) or different
# data (one --data each: a text with one line changed) refuse to train; a rank
# that fails alone (its --ckpt holds no checkpoint to resume) ends the job
# with an error naming it.
launcher=("${mpirun[@]:0:${#mpirun[@]}-2}")  # without "-n 2"
fails() {
  local what="$1" expected="$2"
  shift 2
  rc=0; timeout 60 "$@" > "$tmp/fail.log" 2>&1 || rc=$?
  ((rc != 0 && rc != 124)) && grep -q "$expected" "$tmp/fail.log" ||
    { echo "train_binaries: $what: exit status $rc, expected an error with '$expected'" >&2; cat "$tmp/fail.log"; exit 1; }
  echo "train_binaries: $what: $(grep -m 1 "$expected" "$tmp/fail.log")"
}
fails "ranks with different --lr" "rank(s) 1 disagree with rank 0 on the run settings" \
  "${launcher[@]}" -n 1 "$bin/train_lm" "${lm[@]}" --lr 1e-3 --ckpt "$tmp/lr" : \
  -n 1 "$bin/train_lm" "${lm[@]}" --lr 2e-3 --ckpt "$tmp/lr"
sed '1s/^./X/' "$tmp/text.txt" > "$tmp/other.txt"  # one byte changed
fails "ranks with different --data" "rank(s) 1 disagree with rank 0 on the training data" \
  "${launcher[@]}" -n 1 "$bin/train_lm" "${lm[@]}" --ckpt "$tmp/data" : \
  -n 1 "$bin/train_lm" --data "$tmp/other.txt" "${lm[@]:2}" --ckpt "$tmp/data"  # lm without its --data
fails "a rank without the checkpoint" "rank 1 of 2" "${launcher[@]}" \
  -n 1 "$bin/train_lm" "${args[@]}" --ckpt "$tmp/lm-moa-2" --resume : \
  -n 1 "$bin/train_lm" "${args[@]}" --ckpt "$tmp/nowhere" --resume
echo "train_binaries: 2 ranks train as 1 process"
