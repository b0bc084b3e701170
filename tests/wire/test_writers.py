"""The compiled response writers produce exactly kio's bytes, for every supported version."""

from __future__ import annotations

from io import BytesIO

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from kio.serial import entity_writer

from workgroup.coordinator.writers import compile_writer
from workgroup.errors import UnsupportedVersionError
from workgroup.kafka import apis

from .codec_strategies import results

#: Schemas the compiled writers leave to kio: tagged fields (ApiVersions v3,
#: SaslAuthenticate v2) and an int64 duration (SaslAuthenticate v1); sent once
#: per connection, so kio's speed is plenty.
KIO_WRITES = {(apis.API_VERSIONS, 3), (apis.SASL_AUTHENTICATE, 1), (apis.SASL_AUTHENTICATE, 2)}

VERSIONS = [
    (api.key, version) for api in apis.APIS.values() for version in api.coordinator_versions
]


@pytest.mark.parametrize(("api_key", "version"), VERSIONS)
@settings(max_examples=15, deadline=None)
@given(data=st.data())
def test_compiled_writer_matches_kio(api_key: int, version: int, data: st.DataObject) -> None:
    result = data.draw(results(api_key))
    cls = apis.response_schema(api_key, version)
    try:
        entity = apis.APIS[api_key].result_entity(result, version)
    except UnsupportedVersionError:  # several groups or keys where the version has one
        assume(False)
    expected = BytesIO()
    entity_writer(cls)(expected, entity)
    compiled = compile_writer(cls)
    if compiled is None:
        assert (api_key, version) in KIO_WRITES
        return
    assert compiled(entity) == expected.getvalue()


def test_only_tagged_schemas_fall_back_to_kio() -> None:
    fallbacks = {
        (api_key, version)
        for api_key, version in VERSIONS
        if compile_writer(apis.response_schema(api_key, version)) is None
    }
    assert fallbacks == KIO_WRITES
