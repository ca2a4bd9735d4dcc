package io.netty.handler.codec.haproxy;

import java.util.List;

/** Stub of netty's HAProxy codec (not in pyspark's jars): never made, since no header is detected. */
public abstract class HAProxyMessage {
    public abstract String sourceAddress();

    public abstract int sourcePort();

    public abstract String destinationAddress();

    public abstract int destinationPort();

    public abstract List<HAProxyTLV> tlvs();

    public abstract boolean release();
}
