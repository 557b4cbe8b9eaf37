"""SGLang releases' own launch parsers: raw inventories (parsers/<V>.json.gz), the compact catalog built
from them (catalog.json) and the tools that make both (generate.py, dump_parser.py). The diffusion
server's data lives beside its rules, in rules/diffusion/releases/; the code here serves both."""
