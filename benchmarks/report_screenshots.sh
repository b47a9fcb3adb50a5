#!/usr/bin/env bash
# The screenshots in docs/usage.md ("What a report shows"): the demo's accuracy.png and a
# report of fedct, fedavg, local, centralized and dp-fedct on breast_cancer (seed 0),
# rendered in headless Chromium. Usage: benchmarks/report_screenshots.sh [WORKDIR]
set -euo pipefail
cd "$(dirname "$0")/.."
work="${1:-$(mktemp -d)}"
venv="$(cd "${VENV:-.venv}" && pwd)"
fedlabels() { "$venv/bin/fedlabels" "$@"; }
fedlabels -q demo --output-dir "$work/demo" --seed 0 --overwrite
# dp-fedct at ε = 8 with the mechanism its refusal of the default recommends (docs/privacy.md,
# Defaults)
fedlabels -q run --method dp-fedct --dataset breast_cancer --clients 5 \
    --mechanism dpsgd --opt site_model=private --quorum 0.8 --opt labeller_lr=0.01 \
    --model 'mlp(hidden=128)' --rounds 20 --epsilon 8 --seed 0 \
    --output "$work/dp/dp-fedct.json" --overwrite
(cd "$work" && fedlabels report demo/fedct_decision_tree.json demo/fedavg_mlp.json \
    demo/local_decision_tree.json demo/local_mlp.json demo/centralized_decision_tree.json \
    demo/centralized_mlp.json dp/dp-fedct.json -o report.html --overwrite)
shot() {  # shot OUT.png WIDTH,HEIGHT URL
    chromium --headless --no-sandbox --disable-gpu --disable-quic --no-first-run \
        --disable-background-networking --disable-component-update --disable-sync \
        --user-data-dir="$(mktemp -d)" --hide-scrollbars --screenshot="$1" \
        --window-size="$2" "$3" 2>/dev/null
}
printf '<body style="margin:0"><img src="%s"></body>' "$work/demo/accuracy.png" > "$work/demo.html"
mkdir -p docs/img
size=$("$venv/bin/python" -c "from PIL import Image; print('%d,%d' % Image.open('$work/demo/accuracy.png').size)")
shot docs/img/demo_accuracy.png "$size" "file://$work/demo.html"  # the figure's own size
shot docs/img/report_breast_cancer.png 1100,3500 "file://$work/report.html"
# a 256-colour palette keeps each image under 300 kB
"$venv/bin/python" - <<'PY'
from PIL import Image
for name in ("demo_accuracy", "report_breast_cancer"):
    path = f"docs/img/{name}.png"
    Image.open(path).convert("RGB").quantize(256).save(path, optimize=True)
PY
ls -l docs/img
