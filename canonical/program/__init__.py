"""TensorFlow Federated 0.87's `tff.program`: the pieces a training program
uses, over `canonical.io`, so its state and releases may live on local disk,
s3:// or gs://.

    program state       ProgramStateManager, FileProgramStateManager
    releases            ReleaseManager, MemoryReleaseManager,
                        LoggingReleaseManager, CSVFileReleaseManager,
                        GroupingReleaseManager, FilteringReleaseManager,
                        PeriodicReleaseManager, DelayedReleaseManager,
                        SavedModelFileReleaseManager,
                        TensorBoardReleaseManager
    client data         FederatedDataSource(Iterator), DatasetDataSource,
                        ClientIdDataSource
    value references    MaterializableValueReference, NativeValueReference,
                        materialize_value
    the platform        FederatedContext, NativeFederatedContext (what a
                        program's platform lines install),
                        contains_only_server_placed_data
    from sync code      run_sync

The managers' methods are coroutines, exactly as in TFF 0.87, so program
logic written with `await manager.save(state, version)` runs unchanged.
Code without an event loop wraps each call in `run_sync(...)` (or
`asyncio.run(...)`; `run_sync` also works inside a running loop).
"""

from canonical.program.client_id_data_source import ClientIdDataSource
from canonical.program.client_id_data_source import ClientIdDataSourceIterator
from canonical.program.data_source import FederatedDataSource
from canonical.program.data_source import FederatedDataSourceIterator
from canonical.program.dataset_data_source import DatasetDataSource
from canonical.program.dataset_data_source import DatasetDataSourceIterator
from canonical.program.federated_context import check_in_federated_context
from canonical.program.federated_context import contains_only_server_placed_data
from canonical.program.federated_context import FederatedContext
from canonical.program.file_program_state_manager import FileProgramStateManager
from canonical.program.file_release_manager import CSVFileReleaseManager
from canonical.program.file_release_manager import CSVKeyFieldnameNotFoundError
from canonical.program.file_release_manager import CSVSaveMode
from canonical.program.memory_release_manager import LoggingReleaseManager
from canonical.program.memory_release_manager import MemoryReleaseManager
from canonical.program.native_platform import NativeFederatedContext
from canonical.program.program_state_manager import ProgramStateExistsError
from canonical.program.program_state_manager import ProgramStateManager
from canonical.program.program_state_manager import ProgramStateNotFoundError
from canonical.program.program_state_manager import ProgramStateStructure
from canonical.program.program_state_manager import ProgramStateValue
from canonical.program.release_manager import DelayedReleaseManager
from canonical.program.release_manager import FilteringReleaseManager
from canonical.program.release_manager import GroupingReleaseManager
from canonical.program.release_manager import NotFilterableError
from canonical.program.release_manager import PeriodicReleaseManager
from canonical.program.release_manager import ReleasableStructure
from canonical.program.release_manager import ReleasableValue
from canonical.program.release_manager import ReleaseManager
from canonical.program.saved_model_release_manager import ReleasedValueNotFoundError
from canonical.program.saved_model_release_manager import SavedModelFileReleaseManager
from canonical.program.sync import run_sync
from canonical.program.tensorboard_release_manager import TensorBoardReleaseManager
from canonical.program.value_reference import materialize_value
from canonical.program.value_reference import MaterializableStructure
from canonical.program.value_reference import MaterializableTypeSignature
from canonical.program.value_reference import MaterializableValue
from canonical.program.value_reference import MaterializableValueReference
from canonical.program.value_reference import MaterializedStructure
from canonical.program.value_reference import MaterializedValue
from canonical.program.value_reference import NativeValueReference

__all__ = [
    'CSVFileReleaseManager', 'CSVKeyFieldnameNotFoundError', 'CSVSaveMode',
    'ClientIdDataSource', 'ClientIdDataSourceIterator', 'DatasetDataSource',
    'DatasetDataSourceIterator', 'DelayedReleaseManager', 'FederatedContext',
    'FederatedDataSource', 'FederatedDataSourceIterator',
    'FileProgramStateManager', 'FilteringReleaseManager',
    'GroupingReleaseManager', 'LoggingReleaseManager',
    'MaterializableStructure', 'MaterializableTypeSignature',
    'MaterializableValue', 'MaterializableValueReference',
    'MaterializedStructure', 'MaterializedValue', 'MemoryReleaseManager',
    'NativeFederatedContext', 'NativeValueReference', 'NotFilterableError',
    'PeriodicReleaseManager', 'ProgramStateExistsError',
    'ProgramStateManager', 'ProgramStateNotFoundError',
    'ProgramStateStructure', 'ProgramStateValue', 'ReleasableStructure',
    'ReleasableValue', 'ReleaseManager', 'ReleasedValueNotFoundError',
    'SavedModelFileReleaseManager', 'TensorBoardReleaseManager',
    'check_in_federated_context', 'contains_only_server_placed_data',
    'materialize_value', 'run_sync',
]
