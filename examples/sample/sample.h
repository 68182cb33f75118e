#ifndef SAMPLE_H
#define SAMPLE_H

enum prio { PRIO_LOW = -1, PRIO_NORMAL, PRIO_HIGH };

struct packet {
	struct packet *next;
	unsigned int len;
	unsigned int flags:4, proto:12;
	unsigned char data[];
};

struct pkt_stats {
	unsigned long rx_bytes;
	unsigned long tx_bytes;
};

int net_rx(struct packet *p);
int disk_submit(struct packet *p, enum prio prio);

#endif
