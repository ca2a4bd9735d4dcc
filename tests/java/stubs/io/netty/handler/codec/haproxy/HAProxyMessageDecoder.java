package io.netty.handler.codec.haproxy;

import io.netty.buffer.ByteBuf;
import io.netty.channel.ChannelInboundHandlerAdapter;
import io.netty.handler.codec.ProtocolDetectionResult;

/** Stub of netty's HAProxy codec (not in pyspark's jars): every connection here is direct, never proxied. */
public class HAProxyMessageDecoder extends ChannelInboundHandlerAdapter {
    public static ProtocolDetectionResult<HAProxyProtocolVersion> detectProtocol(ByteBuf buffer) {
        return ProtocolDetectionResult.invalid();
    }
}
