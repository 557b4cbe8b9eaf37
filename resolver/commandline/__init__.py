"""The launch command: parsing flags as SGLang spells them, typed values, --config files, and
upstream's renamed and removed spellings."""
