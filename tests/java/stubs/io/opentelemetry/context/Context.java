package io.opentelemetry.context;

/** Stub of an OpenTelemetry type: signatures only; the store's metrics are never initialised here. */
public interface Context {
}
