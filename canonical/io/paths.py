"""Paths: a local path, or a URL whose scheme names its filesystem (s3://,
gs://, hdfs://, ...). Pure string work; nothing here touches a file."""

import os
import posixpath


def scheme(path) -> str | None:
  """'s3', 'gs', ... for a URL; None for a local path (file:// included)."""
  path = os.fspath(path)
  head, sep, _ = path.partition('://')
  if not sep or not head or not head.replace('+', '').replace(
      '-', '').replace('.', '').isalnum():
    return None
  return None if head == 'file' else head


def is_local(path) -> bool:
  return scheme(path) is None


def local(path) -> str:
  """A local path without its file:// prefix."""
  path = os.fspath(path)
  return path[len('file://'):] if path.startswith('file://') else path


def join(base, *names) -> str:
  base = os.fspath(base)
  if is_local(base):
    return os.path.join(base, *names)
  return posixpath.join(base, *names)


def dirname(path) -> str:
  path = os.fspath(path)
  return os.path.dirname(path) if is_local(path) else posixpath.dirname(path)


def basename(path) -> str:
  path = os.fspath(path).rstrip('/')
  return os.path.basename(path) if is_local(path) else posixpath.basename(path)


def is_within(path, directory) -> bool:
  """Whether `path` is `directory` or below it: local paths compared
  resolved (symbolic links followed), URLs as written (one scheme and
  bucket, then the key's folders)."""
  path, directory = os.fspath(path), os.fspath(directory)
  if is_local(path) != is_local(directory):
    return False
  if is_local(path):
    path, directory = (os.path.realpath(local(p)) for p in (path, directory))
    return os.path.commonpath([path, directory]) == directory
  path, directory = path.rstrip('/'), directory.rstrip('/')
  return path == directory or path.startswith(directory + '/')


TEMPORARY_SUFFIX = '.tmp'


def is_temporary(name) -> bool:
  """Whether a file name is a local write's temporary file (a write in
  flight, or left behind by a killed writer)."""
  return name.startswith('.') and name.endswith(TEMPORARY_SUFFIX)
