#!/usr/bin/env python3
# Cross-checks tests/data/chat_template/*_goldens.json (made by make_goldens.mjs with
# @huggingface/jinja) against Python jinja2 configured as transformers' apply_chat_template
# does. Exit status 1 and a diff on any mismatch. Needs jinja2 >= 3.1 (Debian: python3-jinja2).
import datetime
import glob
import json
import os
import sys

import jinja2
import jinja2.ext
from jinja2.sandbox import ImmutableSandboxedEnvironment

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.abspath(os.path.join(HERE, "../../.."))
CACHE = os.environ.get("MOESERVE_CACHE_DIR", os.path.expanduser("~/.cache/moeserve"))
GOLDEN_DATE = datetime.datetime(2025, 8, 5, 12, 0, 0)  # make_goldens.mjs's GOLDEN_DATE
# make_goldens.mjs's templateFiles: models whose template is llama.cpp's copy under templates/.
TEMPLATE_FILES = {"glm4_moe": "GLM-4.6.jinja"}


def load_template_source(model):
    if model in TEMPLATE_FILES:
        with open(os.path.join(CACHE, "templates", TEMPLATE_FILES[model]), encoding="utf-8") as f:
            return f.read()
    with open(os.path.join(CACHE, "tokenizers", model, "tokenizer_config.json"), encoding="utf-8") as f:
        return json.load(f)["chat_template"]


def make_env():
    # transformers/utils/chat_template_utils.py: _compile_jinja_template
    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                          sort_keys=sort_keys)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    # transformers' strftime_now formats datetime.now(); the goldens are made at GOLDEN_DATE.
    env.globals["strftime_now"] = GOLDEN_DATE.strftime
    return env


def main():
    env = make_env()
    failures = 0
    files = sorted(glob.glob(os.path.join(REPO, "tests/data/chat_template/*_goldens.json")))
    for path in files:
        model = os.path.basename(path)[: -len("_goldens.json")]
        if model == "unit":  # make_unit_goldens.py's own cases, rendered by jinja2 already
            continue
        template = env.from_string(load_template_source(model))
        with open(path) as f:
            goldens = json.load(f)
        for case in goldens:
            expected = template.render(**case["context"])
            if expected != case["rendered"]:
                failures += 1
                print(f"MISMATCH {model}/{case['name']}")
                print("  jinja2:  ", repr(expected))
                print("  golden:  ", repr(case["rendered"]))
        print(f"{model}: {len(goldens)} goldens checked")
    print(f"{failures} mismatches")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
