# mk/clock.mk - the clock shim (tests/clockshim/clockshim.c): an LD_PRELOAD library that
# shifts a process's wall clock by an offset a test changes while it runs (tests/test_clock.c
# starts redis-servers and the redisync command under it; tests/support/clockshim.h).
# Included by the Makefile; test-build builds it next to the test binary. Never sanitized
# (it is preloaded into programs that are not) and linked with nothing but libc.

CLOCKSHIM := $(BUILDDIR)/tests/rs-clockshim.so

test-build: $(CLOCKSHIM)

$(CLOCKSHIM): tests/clockshim/clockshim.c
	@mkdir -p $(@D)
	$(CC) $(CPPFLAGS) -std=c11 -D_GNU_SOURCE $(WARNINGS) -fPIC -shared $(CFLAGS) $(LDFLAGS) -o $@ $<
