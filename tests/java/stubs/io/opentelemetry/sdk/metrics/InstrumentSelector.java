package io.opentelemetry.sdk.metrics;

/** Stub of an OpenTelemetry type: signatures only; the store's metrics are never initialised here. */
public final class InstrumentSelector {
    public static Builder builder() {
        return new Builder();
    }

    /** Builds nothing but the stub. */
    public static final class Builder {
        public Builder setType(InstrumentType type) {
            return this;
        }

        public Builder setName(String name) {
            return this;
        }

        public Builder setMeterName(String name) {
            return this;
        }

        public InstrumentSelector build() {
            return new InstrumentSelector();
        }
    }
}
