package io.netty.handler.codec.haproxy;

/** Stub of netty's HAProxy codec (not in pyspark's jars): DLedger's RPC server never gets a PROXY header. */
public enum HAProxyProtocolVersion {
    V1, V2
}
