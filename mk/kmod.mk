# SPDX-License-Identifier: GPL-2.0-only
#
# moem.ko.
#   make kmod         build kmod/moem.ko against $(KDIR) (W=1 for extra warnings)

.PHONY: kmod kmod-clean

# kbuild must not see this Makefile's command-line O= (its own O= means
# something else), so drop command-line variables from what it inherits.
kmod:
	$(Q)$(MAKE) -C $(KDIR) M=$(CURDIR) MAKEOVERRIDES= O= $(if $(W),W=$(W)) modules

kmod-clean:
	$(Q)$(MAKE) -C $(KDIR) M=$(CURDIR) MAKEOVERRIDES= O= clean
