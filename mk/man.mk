# SPDX-License-Identifier: GPL-2.0-only
#
# Manual pages generated from the programs' own --help and --version
# (Debian's help2man), so they never disagree with the programs:
# $(O)/man/moem.1, moemctl.1, moemd.8; packaging/install.sh installs them.
#
#   make man    build them (part of `make` when help2man is installed)

HELP2MAN	?= $(shell command -v help2man 2>/dev/null)
MAN_PAGES	:= $(O)/man/moem.1 $(O)/man/moemctl.1 $(O)/man/moemd.8

ifneq ($(HELP2MAN),)
all: $(MAN_PAGES)
else
$(call config_note,help2man not installed: no man pages (scripts/deps.sh installs it))
endif

$(O)/man/moem.1: $(O)/bin/moem
	$(call msg,MAN,$@)
	$(Q)mkdir -p $(@D)
	$(Q)$(HELP2MAN) -N -s 1 -n "pack, run, simulate and trace Mixture-of-Experts models" \
		-o $@ $< >/dev/null

$(O)/man/moemctl.1: $(O)/bin/moemctl
	$(call msg,MAN,$@)
	$(Q)mkdir -p $(@D)
	$(Q)$(HELP2MAN) -N -s 1 -n "control moemd and moem.ko's budget knobs" -o $@ $< >/dev/null

$(O)/man/moemd.8: $(O)/bin/moemd
	$(call msg,MAN,$@)
	$(Q)mkdir -p $(@D)
	$(Q)$(HELP2MAN) -N -s 8 -n "serve a .moem pack of Mixture-of-Experts weights" -o $@ $< \
		>/dev/null

.PHONY: man
man: $(MAN_PAGES)
