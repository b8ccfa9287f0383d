#!/usr/bin/env python3
# Renders small templates, one per interpreter feature, with Python jinja2 configured as
# transformers' apply_chat_template does, and writes tests/data/chat_template/unit_goldens.json
# as [{name, template, context, expected}] for tests/tokenizer/chat_template/.
#   python3 make_unit_goldens.py   (needs jinja2 >= 3.1)
import json
import os
import random
import sys


sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from verify_with_jinja2 import REPO, make_env  # noqa: E402

e = make_env()
cases = [
 # (name, template, context)
 ("Text", "plain text", {}),
 ("TrailingNewlineDropped", "a\n", {}),
 ("Output", "{{ 'a' ~ 1 ~ none }}", {}),
 ("StringEscapes", r"{{ 'it\'s\n\t' ~ " + '"\\u00e9\\x41" }}', {}),
 ("IntFloatPrint", "{{ 7 // 2 }} {{ -7 // 2 }} {{ 7 % 3 }} {{ -7 % 3 }} {{ 7 / 2 }} {{ 2 ** 10 }} {{ 1.0 }} {{ 0.1 + 0.2 }} {{ 1e20 }} {{ 1.5e-7 }}", {}),
 ("PrintPythonRepr", "{{ [1, 'a', none, true, 2.5, {'k': 'v'}] }} {{ none }} {{ false }}", {}),
 ("UndefinedPrintsEmpty", "[{{ missing }}][{{ missing is defined }}][{{ missing is undefined }}]", {}),
 ("AttributeOfNoneIsUndefined", "[{{ x.foo }}][{{ x.foo is defined }}]", {"x": None}),
 ("IfElifElse", "{% for n in [1, 2, 3] %}{% if n == 1 %}one{% elif n == 2 %}two{% else %}many{% endif %},{% endfor %}", {}),
 ("TrimBlocks", "{% if true %}\nyes\n{% endif %}\nend", {}),
 ("LstripBlocks", "  {% if true %}\n  x\n  {% endif %}\n  {{ 1 }}  \n{# c #}\nend", {}),
 ("MinusStripsAll", "a  \n  {%- if true -%}  \n  b  \n  {%- endif -%}  \n  c", {}),
 ("PlusKeepsWhitespace", "  {%+ if true +%}\nx{% endif %}", {}),
 ("VariableMinus", "a  {{- 'b' -}}  c\n{{ 'd' }}\ne", {}),
 ("CommentMinus", "a  {#- note -#}  b", {}),
 ("LoopVariables", "{% for x in 'abc' %}{{ loop.index }}{{ loop.index0 }}{{ loop.revindex }}{{ loop.revindex0 }}{{ loop.first }}{{ loop.last }}{{ loop.length }} {% endfor %}", {}),
 ("LoopPrevNext", "{% for x in [1,2,3] %}{{ loop.previtem }}<{{ x }}>{{ loop.nextitem }};{% endfor %}", {}),
 ("ForElse", "{% for x in [] %}x{% else %}empty{% endfor %}", {}),
 ("ForUnpackItems", "{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}", {"d": {"b": 1, "a": 2}}),
 ("ForFilter", "{% for x in range(10) if x % 3 == 0 %}{{ x }}{{ loop.last }},{% endfor %}", {}),
 ("ForOverDict", "{% for k in d %}{{ k }}{% endfor %}", {"d": {"x": 1, "y": 2}}),
 ("LoopScopeDoesNotLeak", "{% set x = 5 %}{% for i in [1, 2] %}{{ x }}{% set x = i %}{{ x }}{% endfor %}{{ x }}", {}),
 ("NamespaceCarriesState", "{% set ns = namespace(n=0, s='') %}{% for i in range(4) %}{% set ns.n = ns.n + i %}{% set ns.s = ns.s ~ i %}{% endfor %}{{ ns.n }} {{ ns.s }}", {}),
 ("BreakContinue", "{% for i in range(10) %}{% if i == 2 %}{% continue %}{% endif %}{% if i == 5 %}{% break %}{% endif %}{{ i }}{% endfor %}", {}),
 ("BlockSet", "{% set greeting %}Hello {{ name }}!{% endset %}[{{ greeting }}]", {"name": "Bob"}),
 ("SetTupleUnpack", "{% set a, b = [1, 2] %}{{ b }}{{ a }}", {}),
 ("Macro", "{% macro tag(name, body='x') %}<{{ name }}>{{ body }}</{{ name }}>{% endmacro %}{{ tag('b') }}{{ tag('i', 'y') }}{{ tag(name='u', body='z') }}", {}),
 ("CallBlock", "{% macro box() %}[{{ caller() }}]{% endmacro %}{% call box() %}inside{% endcall %}", {}),
 ("Ternary", "{{ 'y' if flag else 'n' }}{{ 'y' if not flag else 'n' }}[{{ 'only' if false }}]", {"flag": True}),
 ("BoolOpsReturnOperands", "{{ 0 or 'b' }} {{ 'a' and 'b' }} {{ none or 0 }} {{ not 0 }}", {}),
 ("Comparisons", "{{ 1 < 2 }}{{ 'a' < 'b' }}{{ 2 >= 2.0 }}{{ 1 == 1.0 }}{{ 'a' != 'a' }}{{ 'b' in 'abc' }}{{ 3 not in [1, 2] }}{{ 'k' in {'k': 1} }}", {}),
 ("Precedence", "{{ 1 + 2 * 3 - 4 / 2 }} {{ (1 + 2) * 3 }} {{ 2 ** 3 ** 2 }} {{ -2 ** 2 }} {{ [1, 2] | length - 1 }}", {}),
 ("Slices", "{{ 'hello'[1:3] }} {{ 'hello'[::-1] }} {{ [1, 2, 3, 4][::2] }} {{ [1, 2, 3][-2:] }} {{ [1, 2, 3][:-1] }} {{ 'héllo'[1] }} {{ [1,2,3][5:] }}", {}),
 ("Subscripts", "{{ d['a'] }} {{ d.a }} {{ l[0] }} {{ l[-1] }} [{{ l[9] }}] {{ d['b']['c'] }} {{ l.0 }}", {"d": {"a": 1, "b": {"c": 2}}, "l": [5, 6]}),
 ("StringMethods", "{{ ' ab '.strip() }}|{{ 'xxaxx'.strip('x') }}|{{ '\\nab'.lstrip() }}|{{ 'ab\\n'.rstrip('\\n') }}|{{ 'a,b,,c'.split(',') }}|{{ ' a  b '.split() }}|{{ 'a b c'.split(' ', 1) }}|{{ 'abc'.startswith('ab') }}{{ 'abc'.endswith(('x', 'c')) }}|{{ 'aXb'.upper() }}{{ 'AxB'.lower() }}|{{ 'aaa'.replace('a', 'b', 2) }}|{{ 'hello world'.title() }}|{{ 'hello'.capitalize() }}|{{ 'abcb'.find('b') }}{{ 'abcb'.count('b') }}|{{ '-'.join(['a', 'b']) }}", {}),
 ("DictMethods", "{{ d.keys() | list }} {{ d.values() | list }} {{ d.items() | list }} {{ d.get('a') }} {{ d.get('z') }} {{ d.get('z', 'dflt') }}", {"d": {"a": 1, "b": 2}}),
 ("Filters", "{{ 'abc' | length }} {{ [1, 2] | count }} {{ '  x  ' | trim }} {{ 'Ab' | upper }}{{ 'Ab' | lower }} {{ missing | default('d') }} {{ '' | default('e', true) }} {{ [1, 2, 3] | join('-') }} {{ [3, 4] | first }}{{ [3, 4] | last }} {{ 'ab' | list }} {{ 5 | string ~ 'x' }} {{ '42' | int + 1 }} {{ 'x' | int }} {{ 3.9 | int }} {{ '<b>' | safe }} {{ 'aXa' | replace('a', 'b') }} {{ 'hello world' | title }} {{ [3, 1, 2] | sort }} {{ [1, 2] | reverse | list }} {{ -3 | abs }}", {}),
 ("MapSelectReject", "{{ users | map(attribute='name') | join(',') }} {{ users | selectattr('admin') | map(attribute='name') | list }} {{ users | rejectattr('admin') | map(attribute='name') | list }} {{ users | selectattr('name', 'equalto', 'b') | list | length }} {{ [1, 2, 3, 4] | select('even') | list }} {{ ['a', 'b'] | map('upper') | list }}", {"users": [{"name": "a", "admin": True}, {"name": "b", "admin": False}]}),
 ("ToJson", "{{ d | tojson }}|{{ d | tojson(indent=2) }}|{{ s | tojson }}|{{ d | tojson(sort_keys=true) }}|{{ s | tojson(ensure_ascii=true) }}|{{ [] | tojson(indent=2) }}|{{ 1.0 | tojson }}", {"d": {"z": [1, {"y": None}], "a": "é\"\n"}, "s": "日本\u0001🤖"}),
 ("Tests", "{{ 'a' is string }}{{ 1 is string }}{{ {} is mapping }}{{ [] is mapping }}{{ [] is iterable }}{{ 1 is iterable }}{{ 1 is number }}{{ 1.5 is number }}{{ 'x' is number }}{{ none is none }}{{ 0 is none }}{{ 3 is odd }}{{ 3 is even }}{{ 9 is divisibleby 3 }}{{ true is true }}{{ 1 is true }}{{ false is false }}{{ 1 is integer }}{{ 1.0 is float }}{{ true is boolean }}{{ 2 is eq 2 }}{{ 2 is ne 2 }}{{ 1 is lt 2 }}{{ 1 is in [1] }}{{ x is not none }}{{ 'a' is sameas 'a' }}{{ range is callable }}", {"x": 1}),
 ("Range", "{{ range(3) | list }}{{ range(1, 4) | list }}{{ range(5, 0, -2) | list }}", {}),
 ("ListAndStringConcat", "{{ [1] + [2] }} {{ 'ab' * 2 }} {{ [0] * 3 }}", {}),
 ("DictLiteralOrder", "{% set d = {'b': 1, 'a': 2, 'b': 3} %}{{ d }} {{ d | tojson }}", {}),
 ("NestedLoops", "{% for a in [1, 2] %}{% for b in 'xy' %}{{ loop.index }}{{ a }}{{ b }}{{ loop.depth }} {% endfor %}{{ loop.index }}{% endfor %}", {}),
 ("UnicodeLengthAndStrip", "{{ '日本語' | length }} {{ '\u3000 x \u00a0'.strip() }}|", {}),
 ("MessagesLoop", "{% for m in messages %}{{ m.role }}:{{ m['content'] }}{% if not loop.last %}\n{% endif %}{% endfor %}", {"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]}),
]


def whitespace_cases(count):
    """Random mixes of text and tags with every whitespace-control form ('-', '+',
    trim_blocks, lstrip_blocks), seeded so the file is reproducible."""
    rng = random.Random(7)
    pieces = [" ", "  ", "\n", "\t", "x", " \n ", "\n\n", "{% if true %}", "{%- if true %}",
              "{% if true -%}", "{%+ if true %}", "{% if true +%}", "{{ 'v' }}", "{{- 'v' }}",
              "{{ 'v' -}}", "{# c #}", "{#- c #}", "{# c -#}", "{% set a = 1 %}",
              "{%- set a = 1 -%}"]
    ends = ["{% endif %}", "{%- endif %}", "{% endif -%}", "{%+ endif %}"]
    result = []
    for n in range(count):
        parts, depth = [], 0
        for _ in range(rng.randint(1, 12)):
            p = rng.choice(pieces)
            depth += "if true" in p
            parts.append(p)
            if depth and rng.random() < 0.3:
                parts.append(rng.choice(ends))
                depth -= 1
        src = "".join(parts) + "{% endif %}" * depth + ("\n" if rng.random() < 0.3 else "")
        result.append((f"Whitespace{n}", src, {}))
    return result


cases += whitespace_cases(120)
out = []
for name, tpl, ctx in cases:
    try:
        r = e.from_string(tpl).render(**ctx)
    except Exception as ex:
        sys.exit(f"{name}: jinja2 raised {type(ex).__name__}: {ex}")
    out.append({"name": name, "template": tpl, "context": ctx, "expected": r})
path = os.path.join(REPO, 'tests/data/chat_template/unit_goldens.json')
with open(path, 'w') as f:
    json.dump(out, f, ensure_ascii=False, indent=1)
    f.write('\n')
print(len(out), "ok")
