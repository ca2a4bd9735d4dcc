package org.apache.rocketmq.logging.org.slf4j;

/** Stub of RocketMQ's shaded slf4j Logger: the plain slf4j one under the shaded name. */
public interface Logger extends org.slf4j.Logger {
}
