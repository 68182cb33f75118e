/* Another object with its own `static int counter`: relocations keep them apart. */
#include "sample.h"

static int counter __attribute__((section(".data..percpu"))) = 2;
int disk_hot __attribute__((section(".data..percpu..read_mostly")));

int disk_submit(struct packet *p, enum prio prio)
{
	counter += p->len + prio;
	return counter + disk_hot;
}
