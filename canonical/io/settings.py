"""`Settings`: how a process reaches remote filesystems, as one small value.

They are the filesystem options of Beam's `PipelineOptions` (`--s3_*`,
`--hdfs_*`, GCS's project and credentials), and nothing else: a driver takes
them from its pipeline options and hands them to its workers inside the
`Storage` its steps carry (pickled as these values), so a worker on another
machine reaches the same bucket with the same credentials.
"""

import dataclasses


@dataclasses.dataclass(frozen=True)
class Settings:
  """Filesystem options as sorted `(name, value)` pairs; empty means local
  paths as they are, remote ones with the environment's defaults."""
  values: tuple = ()

  @classmethod
  def of(cls, options=None) -> 'Settings':
    """The filesystem settings of `options`: None, a dict, a list of flags,
    Beam `PipelineOptions`, or `Settings` (returned as they are)."""
    if isinstance(options, Settings):
      return options
    options = pipeline_options(options)
    from apache_beam.options import pipeline_options as beam_options  # pylint: disable=g-import-not-at-top
    found = {}
    for view in (beam_options.S3Options,
                 beam_options.HadoopFileSystemOptions,
                 beam_options.GoogleCloudOptions):
      found.update(options.view_as(view).get_all_options(
          drop_default=True, current_only=True))
    return cls(tuple(sorted((k, v) for k, v in found.items()
                            if v is not None)))

  def as_dict(self) -> dict:
    return dict(self.values)

  def pipeline_options(self):
    """These settings as Beam `PipelineOptions` (what Beam's filesystems
    and S3 client read)."""
    return pipeline_options(self.as_dict())

  def __bool__(self):
    return bool(self.values)


def pipeline_options(options):
  """`PipelineOptions` from None, a dict, a list of flags, or options."""
  from apache_beam.options import pipeline_options as beam_options  # pylint: disable=g-import-not-at-top
  if options is None:  # Not PipelineOptions(): that would parse sys.argv.
    return beam_options.PipelineOptions([])
  if isinstance(options, dict):
    return beam_options.PipelineOptions.from_dictionary(options)
  if isinstance(options, (list, tuple)):
    return beam_options.PipelineOptions(list(options))
  return options
