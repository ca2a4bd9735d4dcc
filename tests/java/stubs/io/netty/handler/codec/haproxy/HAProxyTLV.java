package io.netty.handler.codec.haproxy;

import io.netty.buffer.ByteBuf;

/** Stub of netty's HAProxy codec (not in pyspark's jars): never made, since no header is detected. */
public abstract class HAProxyTLV {
    public abstract ByteBuf content();

    public abstract byte typeByteValue();
}
