package org.apache.rocketmq.logging.org.slf4j;

import java.lang.reflect.Proxy;

/** Stub of RocketMQ's shaded slf4j LoggerFactory: forwards every call to plain slf4j. */
public final class LoggerFactory {
    private LoggerFactory() {
    }

    public static Logger getLogger(String name) {
        org.slf4j.Logger real = org.slf4j.LoggerFactory.getLogger(name);
        return (Logger) Proxy.newProxyInstance(Logger.class.getClassLoader(), new Class<?>[] {Logger.class},
            (proxy, method, args) -> method.invoke(real, args));
    }

    public static Logger getLogger(Class<?> clazz) {
        return getLogger(clazz.getName());
    }
}
