package com.alibaba.fastjson.serializer;

/** Stub of fastjson's features: the names RocketMQ's sources pass; the stub JSON ignores them. */
public enum SerializerFeature {
    BrowserCompatible, PrettyFormat, WriteMapNullValue, SortField, MapSortField, DisableCircularReferenceDetect
}
