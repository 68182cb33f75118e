/* A tiny "subsystem": a percpu statistics block and a static counter. */
#include "sample.h"

#define __percpu_sub(s) __attribute__((section(".data..percpu" s)))

struct pkt_stats net_stats __percpu_sub("..shared_aligned");
static int counter __percpu_sub("") = 1;

int net_rx(struct packet *p)
{
	net_stats.rx_bytes += p->len;
	return ++counter;
}
