"""TFF 0.87 names that do not yet match TFF here (issue 36 in progress).

Each entry names what differs today. `tests/canonical/test_tff_087_api.py`
fails for a name listed here that has come to match (delete its line) and
for one not listed that does not match. The list only shrinks; issue 36
is resolved when it is empty.
"""

NOT_YET = {
    'tff.learning.algorithms.build_fed_eval': "parameter 2 is 'metrics_aggregator', TFF calls it 'metrics_aggregation_process'; parameter 'loop_implementation' defaults to None, TFF: LoopImplementation.DATASET_REDUCE",
    'tff.learning.algorithms.build_fed_recon': "parameter 'metrics_aggregator' defaults to None, TFF: <sum_then_finalize>",
    'tff.learning.algorithms.build_personalization_eval_computation': 'tff.learning.algorithms.build_personalization_eval_computation is missing',
    'tff.learning.algorithms.build_unweighted_fed_avg': "parameter 'metrics_aggregator' defaults to None, TFF: <sum_then_finalize>",
    'tff.learning.algorithms.build_unweighted_fed_prox': "parameter 'metrics_aggregator' defaults to None, TFF: <sum_then_finalize>",
    'tff.learning.algorithms.build_unweighted_mime_lite': "parameter 'metrics_aggregator' defaults to None, TFF: <sum_then_finalize>",
    'tff.learning.metrics.FinalizeThenSampleFactory': 'tff.learning.metrics is missing',
    'tff.learning.metrics.create_keras_metric_finalizer': 'tff.learning.metrics is missing',
    'tff.learning.metrics.finalize_then_sample': 'tff.learning.metrics is missing',
    'tff.learning.models.VariableModel': "lacks method 'forward_pass'; lacks property 'input_spec'; lacks property 'local_variables'; lacks method 'metric_finalizers'; lacks property 'non_trainable_variables'; lacks method 'predict_on_batch'; lacks method 'report_local_unfinalized_metrics'; lacks method 'reset_metrics'; lacks property 'trainable_variables'",
    'tff.learning.models.load': 'tff.learning.models.load is missing',
    'tff.learning.models.save': 'tff.learning.models.save is missing',
    'tff.structure': 'tff.structure is missing',
    'tff.structure.Struct': 'tff.structure is missing',
    'tff.structure.flatten': 'tff.structure is missing',
    'tff.structure.from_container': 'tff.structure is missing',
    'tff.structure.has_field': 'tff.structure is missing',
    'tff.structure.is_same_structure': 'tff.structure is missing',
    'tff.structure.iter_elements': 'tff.structure is missing',
    'tff.structure.map_structure': 'tff.structure is missing',
    'tff.structure.name_list': 'tff.structure is missing',
    'tff.structure.name_list_with_nones': 'tff.structure is missing',
    'tff.structure.name_to_index_map': 'tff.structure is missing',
    'tff.structure.pack_sequence_as': 'tff.structure is missing',
    'tff.structure.to_elements': 'tff.structure is missing',
    'tff.structure.to_odict': 'tff.structure is missing',
    'tff.structure.to_odict_or_tuple': 'tff.structure is missing',
    'tff.structure.update_struct': 'tff.structure is missing',
    'tff.types.AbstractType': 'tff.types.AbstractType is missing',
    'tff.types.ArrayShape': 'tff.types.ArrayShape is missing',
    'tff.types.FederatedType': "lacks property 'all_equal'; lacks method 'check_assignable_from'; lacks method 'check_equivalent_to'; lacks method 'check_identical_to'; lacks method 'children'; lacks method 'compact_representation'; lacks method 'formatted_representation'; lacks method 'is_assignable_from'; lacks method 'is_equivalent_to'; lacks method 'is_identical_to'; lacks property 'member'; lacks property 'placement'",
    'tff.types.FunctionType': "lacks method 'check_assignable_from'; lacks method 'check_equivalent_to'; lacks method 'check_identical_to'; lacks method 'children'; lacks method 'compact_representation'; lacks method 'formatted_representation'; lacks method 'is_assignable_from'; lacks method 'is_equivalent_to'; lacks method 'is_identical_to'; lacks property 'parameter'; lacks property 'result'",
    'tff.types.PlacementType': 'tff.types.PlacementType is missing',
    'tff.types.SequenceType': 'not a class (isinstance and subclassing need one)',
    'tff.types.StructType': 'not a class (isinstance and subclassing need one)',
    'tff.types.StructWithPythonType': 'not a class (isinstance and subclassing need one)',
    'tff.types.TensorType': 'not a class (isinstance and subclassing need one)',
    'tff.types.Type': 'tff.types.Type is missing',
    'tff.types.TypeNotAssignableError': 'tff.types.TypeNotAssignableError is missing',
    'tff.types.TypeRelation': 'tff.types.TypeRelation is missing',
    'tff.types.TypesNotEquivalentError': 'tff.types.TypesNotEquivalentError is missing',
    'tff.types.TypesNotIdenticalError': 'tff.types.TypesNotIdenticalError is missing',
    'tff.types.UnexpectedTypeError': 'tff.types.UnexpectedTypeError is missing',
    'tff.types.contains': 'tff.types.contains is missing',
    'tff.types.contains_only': 'tff.types.contains_only is missing',
    'tff.types.count': 'tff.types.count is missing',
    'tff.types.deserialize_type': 'tff.types.deserialize_type is missing',
    'tff.types.is_shape_fully_defined': 'tff.types.is_shape_fully_defined is missing',
    'tff.types.is_tensorflow_compatible_type': 'tff.types.is_tensorflow_compatible_type is missing',
    'tff.types.num_elements_in_shape': 'tff.types.num_elements_in_shape is missing',
    'tff.types.serialize_type': 'tff.types.serialize_type is missing',
    'tff.types.structure_from_tensor_type_tree': 'tff.types.structure_from_tensor_type_tree is missing',
    'tff.types.to_type': "parameter 0 is 'value', TFF calls it 'obj'",
    'tff.types.type_mismatch_error_message': 'tff.types.type_mismatch_error_message is missing',
    'tff.types.type_to_py_container': 'tff.types.type_to_py_container is missing',
}

# Names issue 36 leaves to issue 38 (privacy), with what they lack.
NEXT_ISSUE = {
    'tff.aggregators.DifferentiallyPrivateFactory': "lacks classmethod 'tree_adaptive'; lacks classmethod 'tree_aggregation'",
}
