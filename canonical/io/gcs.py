"""gs://: Beam's GCS filesystem, and GCS's own create-only upload
(`ifGenerationMatch=0`) for commits. Not tested here: no GCS server."""

from canonical.io import beam
from canonical.io.errors import AlreadyExists


class GcsStore(beam.BeamStore):
  """Google Cloud Storage."""

  def create_only(self, path, data):
    from apache_beam.io.gcp import gcsio  # pylint: disable=g-import-not-at-top
    from google.api_core import exceptions  # pylint: disable=g-import-not-at-top
    bucket, _, name = path[len('gs://'):].partition('/')
    client = gcsio.GcsIO(
        pipeline_options=self.settings.pipeline_options()).client
    try:
      client.bucket(bucket).blob(name).upload_from_string(
          data, if_generation_match=0)
    except exceptions.PreconditionFailed:
      raise AlreadyExists(f'{path!r} already exists.') from None
    return path
